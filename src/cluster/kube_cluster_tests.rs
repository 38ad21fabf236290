//! [`KubeCluster`] against kube-rs's mocked API server: a verifier task
//! takes each request the client sends, checks its method, path and body,
//! and answers with what a real API server would (objects, `Status` errors,
//! lists and watch event streams). Time is paused, so backoffs and timeouts
//! are virtual and the tests deterministic.

use std::io;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::channel::{Channel, Sender};
use http_body_util::{Either, Full};
use k8s_openapi::api::core::v1::Pod;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::time::Instant;
use tower_test::mock;

use super::*;
use crate::api::{NodeClaim, SlimPod};
use crate::testing::from_json;

type ResponseBody = Either<Full<Bytes>, Channel<Bytes>>;

/// How long the mock server waits for a request it expects (virtual time).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

const NODECLAIMS: &str = "/apis/karpenter.sh/v1/nodeclaims";
const LIST: &str = "?&limit=500";
const WATCH: &str = "?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion=";

/// The server side of the mock: hands out the client's requests in order.
struct ApiServer {
    handle: mock::Handle<Request<Body>, Response<ResponseBody>>,
}

/// One request, with its JSON body (`null` if empty), awaiting an answer.
struct Exchange {
    method: Method,
    uri: String,
    body: Value,
    send: mock::SendResponse<Response<ResponseBody>>,
}

/// The open body of a watch response.
struct WatchStream(Sender<Bytes>);

fn mock_cluster() -> (KubeCluster, ApiServer) {
    let (service, handle) = mock::pair::<Request<Body>, Response<ResponseBody>>();
    let cluster = KubeCluster::new(Client::new(service, "default"));
    (cluster, ApiServer { handle })
}

impl ApiServer {
    /// The next request, whatever it is.
    async fn next(&mut self) -> Exchange {
        let (request, send) = tokio::time::timeout(REQUEST_TIMEOUT, self.handle.next_request())
            .await
            .expect("the client sent no request in time")
            .expect("the client is gone");
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.expect("a request body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("a JSON request body")
        };
        Exchange {
            method: parts.method,
            uri: parts.uri.to_string(),
            body,
            send,
        }
    }

    /// The next request, which must be `method` on `uri`.
    async fn expect(&mut self, method: Method, uri: &str) -> Exchange {
        let exchange = self.next().await;
        assert_eq!(
            (&exchange.method, exchange.uri.as_str()),
            (&method, uri),
            "unexpected request"
        );
        exchange
    }

    /// Answers the watcher's initial list of `path` and opens its watch
    /// from the list's resource version.
    async fn serve_list(
        &mut self,
        path: &str,
        resource_version: &str,
        items: Vec<Value>,
    ) -> WatchStream {
        self.expect(Method::GET, &format!("{path}{LIST}"))
            .await
            .respond(200, list(resource_version, items));
        self.expect(Method::GET, &format!("{path}{WATCH}{resource_version}"))
            .await
            .respond_watch()
    }
}

impl Exchange {
    fn respond(self, status: u16, body: Value) {
        let response = Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Either::Left(Full::new(Bytes::from(body.to_string()))))
            .expect("a response");
        self.send.send_response(response);
    }

    /// Answers with a watch stream that stays open until the returned
    /// sender is dropped.
    fn respond_watch(self) -> WatchStream {
        let (sender, body) = Channel::new(16);
        self.send.send_response(Response::new(Either::Right(body)));
        WatchStream(sender)
    }
}

impl WatchStream {
    async fn send(&mut self, event_type: &str, object: Value) {
        let line = format!("{}\n", json!({ "type": event_type, "object": object }));
        self.0
            .send_data(Bytes::from(line))
            .await
            .expect("the watch is open");
    }
}

fn nodeclaim(name: &str, resource_version: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": { "name": name, "resourceVersion": resource_version, "uid": format!("uid-{name}") },
        "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": [],
        },
    })
}

fn pod(namespace: &str, name: &str, resource_version: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": resource_version,
            "uid": format!("uid-{namespace}-{name}"),
        },
        "spec": { "containers": [{ "name": "app", "image": "app:1" }] },
    })
}

fn list(resource_version: &str, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": { "resourceVersion": resource_version },
        "items": items,
    })
}

/// A `meta/v1` `Status` as the API server writes it.
fn status(code: u16, reason: &str, message: &str, details: Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": if code < 300 { "Success" } else { "Failure" },
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    })
}

fn with_deletion_timestamp(mut obj: Value) -> Value {
    obj["metadata"]["deletionTimestamp"] = json!("2026-11-21T12:00:00Z");
    obj["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
    obj
}

fn keys<K: Object>(objects: &[Arc<K>]) -> Vec<String> {
    objects
        .iter()
        .map(|o| ObjectKey::of(&**o).to_string())
        .collect()
}

// ---------------------------------------------------------------- writes

#[tokio::test(start_paused = true)]
async fn create_posts_a_cluster_scoped_object_to_its_collection() {
    let (cluster, mut api) = mock_cluster();
    let obj: NodeClaim = from_json(nodeclaim("abc", ""));
    let sent = serde_json::to_value(&obj).unwrap();
    let server = tokio::spawn(async move {
        let exchange = api.expect(Method::POST, &format!("{NODECLAIMS}?")).await;
        assert_eq!(exchange.body, sent);
        exchange.respond(201, nodeclaim("abc", "5"));
    });
    let created = cluster.create(obj).await;
    server.await.unwrap();
    assert_eq!(
        created.unwrap().metadata.resource_version.as_deref(),
        Some("5")
    );
}

#[tokio::test(start_paused = true)]
async fn create_posts_a_pod_to_its_namespace_or_the_client_default() {
    let (cluster, mut api) = mock_cluster();
    let mut unplaced = pod("", "q", "");
    unplaced["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    let (web, unplaced): (Pod, Pod) = (from_json(pod("web", "p", "")), from_json(unplaced));
    let (web_sent, unplaced_sent) = (
        serde_json::to_value(&web).unwrap(),
        serde_json::to_value(&unplaced).unwrap(),
    );
    let server = tokio::spawn(async move {
        let exchange = api
            .expect(Method::POST, "/api/v1/namespaces/web/pods?")
            .await;
        assert_eq!(exchange.body, web_sent);
        exchange.respond(201, pod("web", "p", "3"));
        let exchange = api
            .expect(Method::POST, "/api/v1/namespaces/default/pods?")
            .await;
        assert_eq!(exchange.body, unplaced_sent);
        exchange.respond(201, pod("default", "q", "4"));
    });
    let web = cluster.create(web).await;
    let unplaced = cluster.create(unplaced).await;
    server.await.unwrap();
    assert_eq!(ObjectKey::of(&*web.unwrap()), ObjectKey::new("web", "p"));
    assert_eq!(
        ObjectKey::of(&*unplaced.unwrap()),
        ObjectKey::new("default", "q")
    );
}

#[tokio::test(start_paused = true)]
async fn replace_puts_the_object_with_its_resource_version() {
    let (cluster, mut api) = mock_cluster();
    let obj: NodeClaim = from_json(nodeclaim("abc", "7"));
    let sent = serde_json::to_value(&obj).unwrap();
    let server = tokio::spawn(async move {
        let exchange = api.expect(Method::PUT, &format!("{NODECLAIMS}/abc?")).await;
        assert_eq!(exchange.body["metadata"]["resourceVersion"], "7");
        assert_eq!(exchange.body, sent);
        exchange.respond(200, nodeclaim("abc", "8"));
    });
    let replaced = cluster.replace(obj).await;
    server.await.unwrap();
    assert_eq!(
        replaced.unwrap().metadata.resource_version.as_deref(),
        Some("8")
    );
}

#[tokio::test(start_paused = true)]
async fn replace_status_puts_the_status_subresource() {
    let (cluster, mut api) = mock_cluster();
    let mut claim = nodeclaim("abc", "7");
    claim["status"] = json!({ "nodeName": "ip-10-0-0-1" });
    let claim: NodeClaim = from_json(claim);
    let mut running = pod("web", "p", "3");
    running["status"] = json!({ "phase": "Running" });
    let running: Pod = from_json(running);
    let (claim_sent, pod_sent) = (
        serde_json::to_value(&claim).unwrap(),
        serde_json::to_value(&running).unwrap(),
    );
    let server = tokio::spawn(async move {
        let exchange = api
            .expect(Method::PUT, &format!("{NODECLAIMS}/abc/status?"))
            .await;
        assert_eq!(exchange.body, claim_sent);
        let mut answer = claim_sent.clone();
        answer["metadata"]["resourceVersion"] = json!("8");
        exchange.respond(200, answer);
        let exchange = api
            .expect(Method::PUT, "/api/v1/namespaces/web/pods/p/status?")
            .await;
        assert_eq!(exchange.body, pod_sent);
        exchange.respond(200, pod_sent.clone());
    });
    let claim = cluster.replace_status(claim).await;
    let running = cluster.replace_status(running).await;
    server.await.unwrap();
    let claim = claim.unwrap();
    assert_eq!(claim.metadata.resource_version.as_deref(), Some("8"));
    assert_eq!(
        claim.status.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("ip-10-0-0-1")
    );
    assert_eq!(
        running
            .unwrap()
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
}

#[tokio::test(start_paused = true)]
async fn delete_answered_with_a_terminating_object_is_terminating() {
    let (cluster, mut api) = mock_cluster();
    let server = tokio::spawn(async move {
        let exchange = api
            .expect(Method::DELETE, &format!("{NODECLAIMS}/abc?"))
            .await;
        assert_eq!(exchange.body, json!({ "propagationPolicy": "Background" }));
        exchange.respond(200, with_deletion_timestamp(nodeclaim("abc", "9")));
        let exchange = api
            .expect(Method::DELETE, "/api/v1/namespaces/web/pods/p?")
            .await;
        exchange.respond(200, with_deletion_timestamp(pod("web", "p", "4")));
    });
    let claim = cluster
        .delete::<NodeClaim>(&ObjectKey::cluster("abc"))
        .await;
    let pod = cluster.delete::<Pod>(&ObjectKey::new("web", "p")).await;
    server.await.unwrap();
    let claim = claim.unwrap();
    assert!(matches!(claim, DeleteOutcome::Terminating(_)), "{claim:?}");
    assert_eq!(
        claim.object().metadata.resource_version.as_deref(),
        Some("9")
    );
    assert!(matches!(pod.unwrap(), DeleteOutcome::Terminating(_)));
}

/// `DeleteParams` go to the API server as its `DeleteOptions`. A negative
/// grace period is sent as 1 s, what the server makes of it.
#[tokio::test(start_paused = true)]
async fn delete_with_sends_the_delete_options() {
    let (cluster, mut api) = mock_cluster();
    let server = tokio::spawn(async move {
        let exchange = api
            .expect(Method::DELETE, "/api/v1/namespaces/web/pods/p?")
            .await;
        assert_eq!(
            exchange.body,
            json!({
                "dryRun": ["All"],
                "gracePeriodSeconds": 20,
                "propagationPolicy": "Foreground",
                "preconditions": {"uid": "u1"},
            })
        );
        exchange.respond(200, with_deletion_timestamp(pod("web", "p", "4")));
        let exchange = api
            .expect(Method::DELETE, "/api/v1/namespaces/web/pods/p?")
            .await;
        assert_eq!(
            exchange.body,
            json!({"gracePeriodSeconds": 1, "propagationPolicy": "Background"})
        );
        exchange.respond(200, with_deletion_timestamp(pod("web", "p", "5")));
    });
    let dry = crate::cluster::DeleteParams {
        preconditions: crate::cluster::Preconditions {
            uid: Some("u1".into()),
            resource_version: None,
        },
        grace_period_seconds: Some(20),
        propagation: crate::cluster::Propagation::Foreground,
        dry_run: true,
    };
    let first = cluster
        .delete_with::<Pod>(&ObjectKey::new("web", "p"), &dry)
        .await;
    let second = cluster
        .delete_with::<Pod>(
            &ObjectKey::new("web", "p"),
            &crate::cluster::DeleteParams::with_grace_period(-3),
        )
        .await;
    server.await.unwrap();
    assert!(matches!(first.unwrap(), DeleteOutcome::Terminating(_)));
    assert!(matches!(second.unwrap(), DeleteOutcome::Terminating(_)));
}

#[tokio::test(start_paused = true)]
async fn delete_answered_with_the_final_object_is_deleted() {
    let (cluster, mut api) = mock_cluster();
    let server = tokio::spawn(async move {
        api.expect(Method::DELETE, &format!("{NODECLAIMS}/abc?"))
            .await
            .respond(200, nodeclaim("abc", "9"));
    });
    let outcome = cluster
        .delete::<NodeClaim>(&ObjectKey::cluster("abc"))
        .await;
    server.await.unwrap();
    let outcome = outcome.unwrap();
    assert!(outcome.is_deleted());
    assert_eq!(outcome.object().metadata.uid.as_deref(), Some("uid-abc"));
}

#[tokio::test(start_paused = true)]
async fn delete_answered_with_a_success_status_is_deleted() {
    let (cluster, mut api) = mock_cluster();
    let server = tokio::spawn(async move {
        let details = json!({ "name": "p", "kind": "pods", "uid": "uid-web-p" });
        api.expect(Method::DELETE, "/api/v1/namespaces/web/pods/p?")
            .await
            .respond(200, status(200, "", "", details));
    });
    let outcome = cluster.delete::<Pod>(&ObjectKey::new("web", "p")).await;
    server.await.unwrap();
    let outcome = outcome.unwrap();
    assert!(outcome.is_deleted());
    let meta = &outcome.object().metadata;
    assert_eq!(
        (
            meta.namespace.as_deref(),
            meta.name.as_deref(),
            meta.uid.as_deref()
        ),
        (Some("web"), Some("p"), Some("uid-web-p"))
    );
}

#[tokio::test(start_paused = true)]
async fn evict_posts_a_policy_v1_eviction() {
    let (cluster, mut api) = mock_cluster();
    let server = tokio::spawn(async move {
        let exchange = api
            .expect(Method::POST, "/api/v1/namespaces/default/pods/p/eviction?")
            .await;
        assert_eq!(
            exchange.body,
            json!({
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": { "name": "p", "namespace": "default" },
            })
        );
        exchange.respond(201, status(201, "", "", json!(null)));
    });
    let evicted = cluster.evict("default", "p").await;
    server.await.unwrap();
    evicted.unwrap();
}

// ---------------------------------------------------------------- errors

/// The error `op` fails with when the server answers its first request
/// with `answer`.
async fn answered_with<T: std::fmt::Debug>(
    answer: Value,
    op: impl AsyncFnOnce(&KubeCluster) -> Result<T, ApiError>,
) -> ApiError {
    let (cluster, mut api) = mock_cluster();
    let code = u16::try_from(answer["code"].as_u64().expect("a code")).unwrap();
    let server = tokio::spawn(async move { api.next().await.respond(code, answer) });
    let result = op(&cluster).await;
    server.await.unwrap();
    result.expect_err("the request fails")
}

fn details(name: &str, kind: &str, group: &str, causes: Value) -> Value {
    let mut details = json!({ "name": name, "kind": kind, "group": group });
    if !causes.is_null() {
        details["causes"] = causes;
    }
    details
}

#[tokio::test(start_paused = true)]
async fn not_found_maps_to_not_found() {
    let answer = status(
        404,
        "NotFound",
        r#"nodeclaims.karpenter.sh "abc" not found"#,
        details("abc", "nodeclaims", "karpenter.sh", json!(null)),
    );
    let e = answered_with(answer, async |c| {
        c.replace::<NodeClaim>(from_json(nodeclaim("abc", "1")))
            .await
    })
    .await;
    assert_eq!(
        e,
        ApiError::NotFound {
            resource: "nodeclaims.karpenter.sh".into(),
            key: ObjectKey::cluster("abc"),
        }
    );
    assert_eq!(e.to_string(), r#"nodeclaims.karpenter.sh "abc" not found"#);
}

/// A create in a namespace that does not exist: the API server answers that
/// the namespace is missing, and the error says so (it said the object was).
#[tokio::test(start_paused = true)]
async fn a_missing_namespace_is_named_as_what_is_missing() {
    let answer = status(
        404,
        "NotFound",
        r#"namespaces "dovetail" not found"#,
        details("dovetail", "namespaces", "", json!(null)),
    );
    let e = answered_with(answer, async |c| {
        let lease: k8s_openapi::api::coordination::v1::Lease = from_json(json!({
            "metadata": {"name": "dovetail-leader", "namespace": "dovetail"}
        }));
        c.create(lease).await
    })
    .await;
    assert!(e.is_not_found());
    assert_eq!(e.to_string(), r#"namespaces "dovetail" not found"#);
}

#[tokio::test(start_paused = true)]
async fn a_stale_resource_version_maps_to_conflict_with_the_servers_message() {
    let message = r#"Operation cannot be fulfilled on nodeclaims.karpenter.sh "abc": the object has been modified; please apply your changes to the latest version and try again"#;
    let answer = status(
        409,
        "Conflict",
        message,
        details("abc", "nodeclaims", "karpenter.sh", json!(null)),
    );
    let e = answered_with(answer, async |c| {
        c.replace::<NodeClaim>(from_json(nodeclaim("abc", "1")))
            .await
    })
    .await;
    assert_eq!(
        e,
        ApiError::Conflict {
            resource: "nodeclaims.karpenter.sh".into(),
            key: ObjectKey::cluster("abc"),
            message: "the object has been modified; please apply your changes to the latest version and try again".into(),
        }
    );
    assert!(e.is_conflict());
    assert_eq!(e.to_string(), message);
}

#[tokio::test(start_paused = true)]
async fn an_existing_name_maps_to_already_exists() {
    let answer = status(
        409,
        "AlreadyExists",
        r#"pods "p" already exists"#,
        details("p", "pods", "", json!(null)),
    );
    let e = answered_with(answer, async |c| {
        c.create::<Pod>(from_json(pod("web", "p", ""))).await
    })
    .await;
    assert_eq!(
        e,
        ApiError::AlreadyExists {
            resource: "pods".into(),
            key: ObjectKey::new("web", "p"),
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_rejected_object_maps_to_invalid_with_each_cause() {
    let causes = json!([
        { "reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image" },
        { "reason": "FieldValueForbidden", "message": "Forbidden: pod updates may not change fields other than `spec.containers[*].image`", "field": "" },
    ]);
    let answer = status(
        422,
        "Invalid",
        r#"Pod "p" is invalid: [spec.containers[0].image: Required value, Forbidden: ...]"#,
        details("p", "Pod", "", causes),
    );
    let e = answered_with(answer, async |c| {
        c.create::<Pod>(from_json(pod("web", "p", ""))).await
    })
    .await;
    assert_eq!(
        e,
        ApiError::Invalid {
            resource: "pods".into(),
            key: ObjectKey::new("web", "p"),
            messages: vec![
                "spec.containers[0].image: Required value".into(),
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`".into(),
            ],
        }
    );
}

#[tokio::test(start_paused = true)]
async fn an_eviction_refused_by_a_budget_maps_to_too_many_requests() {
    let message = "Cannot evict pod as it would violate the pod's disruption budget.";
    let causes = json!([{ "reason": "DisruptionBudget", "message": "The disruption budget web needs 2 healthy pods and has 2 currently", "field": "" }]);
    let answer = status(429, "TooManyRequests", message, json!({ "causes": causes }));
    let e = answered_with(answer, async |c| c.evict("web", "p").await).await;
    assert_eq!(
        e,
        ApiError::TooManyRequests {
            message: message.into(),
            cause: Some(
                "The disruption budget web needs 2 healthy pods and has 2 currently".into()
            ),
        }
    );
}

#[tokio::test(start_paused = true)]
async fn other_failures_keep_the_servers_code_and_message() {
    let answer = status(
        410,
        "Expired",
        "too old resource version: 5 (10)",
        json!(null),
    );
    let e = answered_with(answer, async |c| {
        c.replace::<NodeClaim>(from_json(nodeclaim("abc", "5")))
            .await
    })
    .await;
    assert_eq!(
        e,
        ApiError::Gone {
            requested: 5,
            oldest: 10
        }
    );

    let answer = status(500, "InternalError", "etcd is unhappy", json!(null));
    let e = answered_with(answer, async |c| c.evict("web", "p").await).await;
    assert_eq!(
        e,
        ApiError::Internal {
            message: "etcd is unhappy".into()
        }
    );

    let message = r#"pods "p" is forbidden: User "dovetail" cannot delete resource "pods""#;
    let answer = status(403, "Forbidden", message, json!(null));
    let e = answered_with(answer, async |c| {
        c.delete::<Pod>(&ObjectKey::new("web", "p")).await
    })
    .await;
    assert_eq!(
        e,
        ApiError::Internal {
            message: format!("403 Forbidden: {message}")
        }
    );

    let answer = status(400, "BadRequest", "the body is not an object", json!(null));
    let e = answered_with(answer, async |c| {
        c.create::<Pod>(from_json(pod("web", "p", ""))).await
    })
    .await;
    assert_eq!(
        e,
        ApiError::BadRequest {
            message: "the body is not an object".into()
        }
    );
}

// ---------------------------------------------------------------- reads

/// Waits for the caches to sync, failing (rather than retrying forever in
/// virtual time) if the mock server stopped answering.
async fn synced(cluster: &KubeCluster) {
    tokio::time::timeout(Duration::from_secs(30), cluster.wait_until_synced())
        .await
        .expect("the caches synced in time")
        .expect("the watches run");
}

/// Polls `done` (yielding virtual time to the watch tasks) until it holds.
async fn eventually(mut done: impl FnMut() -> bool) {
    // Long enough for a backoff and a relist (virtual time).
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the condition did not hold in time");
}

#[tokio::test(start_paused = true)]
async fn reads_come_from_the_cache_filled_by_the_list_and_the_watch() {
    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<NodeClaim>().unwrap();
    let (listed, read) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let items = vec![
            nodeclaim("c", "3"),
            nodeclaim("a", "1"),
            nodeclaim("b", "2"),
        ];
        let mut watch = api.serve_list(NODECLAIMS, "10", items).await;
        read.await.unwrap();
        watch.send("ADDED", nodeclaim("d", "11")).await;
        watch.send("DELETED", nodeclaim("a", "12")).await;
        let mut modified = nodeclaim("b", "13");
        modified["metadata"]["labels"] = json!({ "touched": "yes" });
        watch.send("MODIFIED", modified).await;
        // Keep the watch open while the test reads.
        tokio::time::sleep(Duration::from_secs(10)).await;
    });
    synced(&cluster).await;
    // The list came out of order; the cache lists by name, one list until
    // the kind changes.
    let first = cluster.list::<NodeClaim>();
    assert_eq!(keys(&first), ["a", "b", "c"]);
    assert!(Listed::ptr_eq(&first, &cluster.list::<NodeClaim>()));
    let b = cluster.get::<NodeClaim>(&ObjectKey::cluster("b")).unwrap();
    assert_eq!(b.metadata.resource_version.as_deref(), Some("2"));
    assert!(
        cluster
            .get::<NodeClaim>(&ObjectKey::cluster("zzz"))
            .is_none()
    );
    listed.send(()).unwrap();
    eventually(|| keys(&cluster.list::<NodeClaim>()) == ["b", "c", "d"]).await;
    eventually(|| {
        cluster
            .get::<NodeClaim>(&ObjectKey::cluster("b"))
            .is_some_and(|b| b.metadata.resource_version.as_deref() == Some("13"))
    })
    .await;
    let b = cluster.get::<NodeClaim>(&ObjectKey::cluster("b")).unwrap();
    assert_eq!(
        b.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("touched"))
            .map(String::as_str),
        Some("yes")
    );
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn namespaced_objects_list_by_namespace_then_name() {
    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<Pod>().unwrap();
    let server = tokio::spawn(async move {
        let items = vec![
            pod("web", "a", "1"),
            pod("db", "b", "2"),
            pod("web", "0", "3"),
            pod("db", "a", "4"),
        ];
        let watch = api.serve_list("/api/v1/pods", "10", items).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(watch);
    });
    synced(&cluster).await;
    assert_eq!(
        keys(&cluster.list::<Pod>()),
        ["db/a", "db/b", "web/0", "web/a"]
    );
    let found = cluster.get::<Pod>(&ObjectKey::new("web", "a")).unwrap();
    assert_eq!(found.metadata.resource_version.as_deref(), Some("1"));
    assert!(cluster.get::<Pod>(&ObjectKey::new("db", "0")).is_none());
    assert!(cluster.get::<Pod>(&ObjectKey::cluster("a")).is_none());
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_ends_resumes_from_the_last_resource_version() {
    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<NodeClaim>().unwrap();
    let server = tokio::spawn(async move {
        let mut watch = api
            .serve_list(NODECLAIMS, "10", vec![nodeclaim("a", "1")])
            .await;
        watch.send("ADDED", nodeclaim("b", "11")).await;
        drop(watch);
        let mut watch = api
            .expect(Method::GET, &format!("{NODECLAIMS}{WATCH}11"))
            .await
            .respond_watch();
        watch.send("ADDED", nodeclaim("c", "12")).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
    });
    synced(&cluster).await;
    eventually(|| cluster.list::<NodeClaim>().len() == 3).await;
    server.await.unwrap();
    assert_eq!(keys(&cluster.list::<NodeClaim>()), ["a", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn a_watch_error_keeps_the_watch_and_a_failed_rewatch_is_retried_without_a_relist() {
    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<NodeClaim>().unwrap();
    let server = tokio::spawn(async move {
        let mut watch = api
            .serve_list(NODECLAIMS, "10", vec![nodeclaim("a", "1")])
            .await;
        watch.send("ADDED", nodeclaim("b", "11")).await;
        // An error event other than 410: the stream goes on.
        let unhappy = status(500, "InternalError", "etcd is unhappy", json!(null));
        watch.send("ERROR", unhappy.clone()).await;
        watch.send("ADDED", nodeclaim("c", "12")).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(watch);
        // The stream ends: the watch restarts from the last version seen,
        // and when that request fails it is retried after a backoff, from
        // the same version (a relist would be a GET of the list here).
        let uri = format!("{NODECLAIMS}{WATCH}12");
        api.expect(Method::GET, &uri).await.respond(500, unhappy);
        let failed = Instant::now();
        let watch = api.expect(Method::GET, &uri).await.respond_watch();
        assert!(failed.elapsed() >= Duration::from_millis(800), "backed off");
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(watch);
    });
    synced(&cluster).await;
    eventually(|| cluster.list::<NodeClaim>().len() == 3).await;
    server.await.unwrap();
    assert_eq!(keys(&cluster.list::<NodeClaim>()), ["a", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn wait_until_synced_waits_for_every_watched_kind() {
    let (mut cluster, mut api) = mock_cluster();
    cluster
        .watch::<NodeClaim>()
        .unwrap()
        .watch::<Pod>()
        .unwrap();
    let (release_pods, pods_released) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        // The two watchers list concurrently, in no particular order.
        let (first, second) = (api.next().await, api.next().await);
        let (claims, pods) = if first.uri.starts_with(NODECLAIMS) {
            (first, second)
        } else {
            (second, first)
        };
        assert_eq!(claims.uri, format!("{NODECLAIMS}{LIST}"));
        assert_eq!(pods.uri, format!("/api/v1/pods{LIST}"));
        claims.respond(200, list("10", vec![nodeclaim("a", "1")]));
        let claims_watch = api
            .expect(Method::GET, &format!("{NODECLAIMS}{WATCH}10"))
            .await
            .respond_watch();
        pods_released.await.unwrap();
        pods.respond(200, list("20", vec![pod("web", "p", "2")]));
        let pods_watch = api
            .expect(Method::GET, &format!("/api/v1/pods{WATCH}20"))
            .await
            .respond_watch();
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop((claims_watch, pods_watch));
    });
    let early = tokio::time::timeout(Duration::from_secs(5), cluster.wait_until_synced()).await;
    assert!(early.is_err(), "synced before the pods were listed");
    assert_eq!(keys(&cluster.list::<NodeClaim>()), ["a"]);
    assert!(cluster.list::<Pod>().is_empty());
    release_pods.send(()).unwrap();
    synced(&cluster).await;
    assert_eq!(keys(&cluster.list::<Pod>()), ["web/p"]);
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failed_list_is_retried_after_a_backoff() {
    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<NodeClaim>().unwrap();
    let server = tokio::spawn(async move {
        let uri = format!("{NODECLAIMS}{LIST}");
        api.expect(Method::GET, &uri).await.respond(
            500,
            status(500, "InternalError", "etcd is unhappy", json!(null)),
        );
        let failed = Instant::now();
        let retry = api.expect(Method::GET, &uri).await;
        let waited = failed.elapsed();
        // The default backoff starts at 800ms, plus up to as much jitter.
        assert!(
            waited >= Duration::from_millis(800) && waited <= Duration::from_millis(1600),
            "{waited:?}"
        );
        retry.respond(200, list("10", vec![nodeclaim("a", "1")]));
        let watch = api
            .expect(Method::GET, &format!("{NODECLAIMS}{WATCH}10"))
            .await
            .respond_watch();
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(watch);
    });
    synced(&cluster).await;
    assert_eq!(keys(&cluster.list::<NodeClaim>()), ["a"]);
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn deleting_with_a_status_answer_returns_the_cached_object() {
    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<Pod>().unwrap();
    let server = tokio::spawn(async move {
        let mut labelled = pod("web", "p", "1");
        labelled["metadata"]["labels"] = json!({ "app": "web" });
        let watch = api.serve_list("/api/v1/pods", "10", vec![labelled]).await;
        api.expect(Method::DELETE, "/api/v1/namespaces/web/pods/p?")
            .await
            .respond(
                200,
                status(200, "", "", json!({ "name": "p", "kind": "pods" })),
            );
        drop(watch);
    });
    synced(&cluster).await;
    let outcome = cluster.delete::<Pod>(&ObjectKey::new("web", "p")).await;
    server.await.unwrap();
    let outcome = outcome.unwrap();
    assert!(outcome.is_deleted());
    assert_eq!(
        outcome
            .object()
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("web")
    );
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn unwatched_kinds_read_as_empty_and_warn_once() {
    let (cluster, _api) = mock_cluster();
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    assert!(cluster.list::<NodeClaim>().is_empty());
    assert!(cluster.get::<NodeClaim>(&ObjectKey::cluster("a")).is_none());
    assert!(cluster.list::<Pod>().is_empty());
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = logs.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 2, "{logs}");
    assert!(
        warnings[0].contains("kind=NodeClaim") && warnings[1].contains("kind=Pod"),
        "{logs}"
    );
    // Nothing is watched, so there is nothing to wait for.
    synced(&cluster).await;
}

#[test]
fn watching_outside_a_runtime_fails() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut cluster = {
        let _entered = runtime.enter();
        mock_cluster().0
    };
    assert!(cluster.watch::<Pod>().is_err());
    assert!(
        format!("{cluster:?}").contains("watched: []"),
        "{cluster:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_the_cluster_stops_its_watches() {
    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<NodeClaim>().unwrap();
    let sync = tokio::spawn(async move {
        synced(&cluster).await;
        cluster
    });
    let mut watch = api.serve_list(NODECLAIMS, "10", Vec::new()).await;
    let cluster = sync.await.unwrap();
    watch.send("ADDED", nodeclaim("a", "11")).await;
    eventually(|| cluster.list::<NodeClaim>().len() == 1).await;
    drop(cluster);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let line = Bytes::from_static(b"{}\n");
    assert!(
        watch.0.send_data(line).await.is_err(),
        "the watch is still read"
    );
}

#[tokio::test(start_paused = true)]
async fn apply_patches_server_side_as_the_field_manager_and_dry_runs_with_dry_run_all() {
    let (cluster, mut api) = mock_cluster();
    let obj: NodeClaim = from_json(nodeclaim("abc", ""));
    let sent = serde_json::to_value(&obj).unwrap();
    let server = tokio::spawn(async move {
        let exchange = api
            .expect(
                Method::PATCH,
                &format!("{NODECLAIMS}/abc?&dryRun=All&force=true&fieldManager=dovetail"),
            )
            .await;
        assert_eq!(exchange.body, sent);
        exchange.respond(200, nodeclaim("abc", "8"));
        let exchange = api
            .expect(
                Method::PATCH,
                &format!("{NODECLAIMS}/abc?&force=true&fieldManager=dovetail"),
            )
            .await;
        exchange.respond(200, nodeclaim("abc", "9"));
    });
    let params = ApplyParams::new("dovetail");
    let dry = cluster.apply(obj.clone(), &params.clone().dry_run()).await;
    let applied = cluster.apply(obj, &params).await;
    server.await.unwrap();
    assert_eq!(dry.unwrap().metadata.resource_version.as_deref(), Some("8"));
    assert_eq!(
        applied.unwrap().metadata.resource_version.as_deref(),
        Some("9")
    );
}

// ---------------------------------------------------- reading own writes

/// The resource version the cache holds for a NodeClaim, if any.
fn cached_version(cluster: &KubeCluster, name: &str) -> Option<String> {
    cluster
        .get::<NodeClaim>(&ObjectKey::cluster(name))
        .and_then(|c| c.metadata.resource_version.clone())
}

fn overlay_len<K: Object>(cluster: &KubeCluster) -> usize {
    cluster.cache::<K>().map_or(0, |c| c.overlay.len())
}

#[tokio::test(start_paused = true)]
async fn a_write_is_read_back_before_its_watch_event_arrives() {
    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<NodeClaim>().unwrap();
    let (go, went) = tokio::sync::oneshot::channel::<()>();
    let (sent_event, event_sent) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let mut watch = api
            .serve_list(NODECLAIMS, "10", vec![nodeclaim("a", "1")])
            .await;
        let mut launched = nodeclaim("a", "11");
        launched["status"] = json!({ "providerID": "aws:///us-east-1a/i-1" });
        let exchange = api
            .expect(Method::PUT, &format!("{NODECLAIMS}/a/status?"))
            .await;
        exchange.respond(200, launched.clone());
        went.await.unwrap();
        // The event of the write, then a later change by someone else.
        watch.send("MODIFIED", launched).await;
        let mut labelled = nodeclaim("a", "12");
        labelled["status"] = json!({ "providerID": "aws:///us-east-1a/i-1" });
        labelled["metadata"]["labels"] = json!({ "team": "x" });
        watch.send("MODIFIED", labelled).await;
        sent_event.send(()).unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
    });
    synced(&cluster).await;
    let mut claim = (*cluster.get::<NodeClaim>(&ObjectKey::cluster("a")).unwrap()).clone();
    claim.status = Some(from_json(json!({ "providerID": "aws:///us-east-1a/i-1" })));
    let revision = cluster.revision::<NodeClaim>();
    cluster.replace_status(claim).await.unwrap();
    // The watch has not delivered the write, yet reads see it.
    assert_eq!(cached_version(&cluster, "a").as_deref(), Some("11"));
    let listed = cluster.list::<NodeClaim>();
    assert_eq!(
        listed[0]
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref()),
        Some("aws:///us-east-1a/i-1")
    );
    assert!(cluster.revision::<NodeClaim>() > revision);
    assert_eq!(overlay_len::<NodeClaim>(&cluster), 1);
    go.send(()).unwrap();
    event_sent.await.unwrap();
    eventually(|| cached_version(&cluster, "a").as_deref() == Some("12")).await;
    assert_eq!(overlay_len::<NodeClaim>(&cluster), 0);
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_event_older_than_a_write_does_not_hide_it() {
    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<NodeClaim>().unwrap();
    let (go, went) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let mut watch = api
            .serve_list(NODECLAIMS, "10", vec![nodeclaim("a", "1")])
            .await;
        api.expect(Method::PUT, &format!("{NODECLAIMS}/a?"))
            .await
            .respond(200, nodeclaim("a", "15"));
        went.await.unwrap();
        // A change made before the write reaches the watch after it.
        watch.send("MODIFIED", nodeclaim("a", "13")).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
    });
    synced(&cluster).await;
    let claim = (*cluster.get::<NodeClaim>(&ObjectKey::cluster("a")).unwrap()).clone();
    cluster.replace(claim).await.unwrap();
    let written = cluster.revision::<NodeClaim>();
    go.send(()).unwrap();
    eventually(|| cluster.revision::<NodeClaim>() > written).await;
    assert_eq!(cached_version(&cluster, "a").as_deref(), Some("15"));
    let listed_version = |cluster: &KubeCluster| {
        cluster.list::<NodeClaim>()[0]
            .metadata
            .resource_version
            .clone()
    };
    assert_eq!(listed_version(&cluster).as_deref(), Some("15"));
    // Nothing newer arrives: the write stops shadowing the cache after the
    // TTL, in a list too (no event marks the moment).
    tokio::time::sleep(OVERLAY_TTL).await;
    assert_eq!(cached_version(&cluster, "a").as_deref(), Some("13"));
    assert_eq!(listed_version(&cluster).as_deref(), Some("13"));
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn created_and_deleted_objects_are_read_as_such_at_once() {
    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<NodeClaim>().unwrap();
    let (go, went) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let mut watch = api
            .serve_list(NODECLAIMS, "10", vec![nodeclaim("a", "1")])
            .await;
        api.expect(Method::POST, &format!("{NODECLAIMS}?"))
            .await
            .respond(201, nodeclaim("b", "11"));
        api.expect(Method::DELETE, &format!("{NODECLAIMS}/a?"))
            .await
            .respond(200, status(200, "Success", "", json!({ "name": "a" })));
        went.await.unwrap();
        watch.send("ADDED", nodeclaim("b", "11")).await;
        watch.send("DELETED", nodeclaim("a", "12")).await;
        // Someone creates `a` again.
        watch.send("ADDED", nodeclaim("a", "13")).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
    });
    synced(&cluster).await;
    cluster
        .create::<NodeClaim>(from_json(nodeclaim("b", "")))
        .await
        .unwrap();
    let deleted = cluster
        .delete::<NodeClaim>(&ObjectKey::cluster("a"))
        .await
        .unwrap();
    assert!(deleted.is_deleted());
    assert_eq!(keys(&cluster.list::<NodeClaim>()), ["b"]);
    assert!(cluster.get::<NodeClaim>(&ObjectKey::cluster("a")).is_none());
    go.send(()).unwrap();
    eventually(|| keys(&cluster.list::<NodeClaim>()) == ["a", "b"]).await;
    assert_eq!(cached_version(&cluster, "a").as_deref(), Some("13"));
    assert_eq!(overlay_len::<NodeClaim>(&cluster), 0);
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn writes_of_unwatched_kinds_and_dry_runs_are_not_cached() {
    let (cluster, mut api) = mock_cluster();
    let server = tokio::spawn(async move {
        api.expect(Method::POST, &format!("{NODECLAIMS}?"))
            .await
            .respond(201, nodeclaim("b", "11"));
    });
    cluster
        .create::<NodeClaim>(from_json(nodeclaim("b", "")))
        .await
        .unwrap();
    server.await.unwrap();
    assert!(cluster.get::<NodeClaim>(&ObjectKey::cluster("b")).is_none());

    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<NodeClaim>().unwrap();
    let server = tokio::spawn(async move {
        let watch = api.serve_list(NODECLAIMS, "10", Vec::new()).await;
        api.expect(
            Method::PATCH,
            &format!("{NODECLAIMS}/b?&dryRun=All&force=true&fieldManager=dovetail"),
        )
        .await
        .respond(200, nodeclaim("b", "11"));
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(watch);
    });
    synced(&cluster).await;
    let params = ApplyParams::new("dovetail").dry_run();
    cluster
        .apply::<NodeClaim>(from_json(nodeclaim("b", "")), &params)
        .await
        .unwrap();
    assert!(cluster.list::<NodeClaim>().is_empty());
    server.await.unwrap();
}

// ------------------------------------------------ watch errors, options

#[tokio::test(start_paused = true)]
async fn a_watch_answered_with_410_relists_and_drops_what_is_gone() {
    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<NodeClaim>().unwrap();
    let mut changes = cluster.changes();
    let server = tokio::spawn(async move {
        let mut watch = api
            .serve_list(
                NODECLAIMS,
                "10",
                vec![nodeclaim("a", "1"), nodeclaim("b", "2")],
            )
            .await;
        // The server compacted its history while the watch was away.
        let gone = status(
            410,
            "Expired",
            "too old resource version: 10 (200)",
            json!(null),
        );
        watch.send("ERROR", gone).await;
        drop(watch);
        let relist = api
            .expect(Method::GET, &format!("{NODECLAIMS}{LIST}"))
            .await;
        relist.respond(
            200,
            list("300", vec![nodeclaim("b", "250"), nodeclaim("c", "260")]),
        );
        let watch = api
            .expect(Method::GET, &format!("{NODECLAIMS}{WATCH}300"))
            .await
            .respond_watch();
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(watch);
    });
    synced(&cluster).await;
    assert_eq!(keys(&cluster.list::<NodeClaim>()), ["a", "b"]);
    changes.borrow_and_update();
    eventually(|| keys(&cluster.list::<NodeClaim>()) == ["b", "c"]).await;
    assert_eq!(cached_version(&cluster, "b").as_deref(), Some("250"));
    assert!(changes.has_changed().unwrap(), "the relist woke the loop");
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_relist_ends_writes_to_objects_that_are_gone() {
    let (mut cluster, mut api) = mock_cluster();
    cluster.watch::<NodeClaim>().unwrap();
    let (go, went) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let mut watch = api
            .serve_list(NODECLAIMS, "10", vec![nodeclaim("a", "1")])
            .await;
        api.expect(Method::PUT, &format!("{NODECLAIMS}/a?"))
            .await
            .respond(200, nodeclaim("a", "11"));
        went.await.unwrap();
        // `a` was deleted meanwhile; the event was compacted away.
        watch
            .send(
                "ERROR",
                status(410, "Expired", "too old resource version", json!(null)),
            )
            .await;
        drop(watch);
        api.expect(Method::GET, &format!("{NODECLAIMS}{LIST}"))
            .await
            .respond(200, list("40", Vec::new()));
        let watch = api
            .expect(Method::GET, &format!("{NODECLAIMS}{WATCH}40"))
            .await
            .respond_watch();
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(watch);
    });
    synced(&cluster).await;
    let claim = (*cluster.get::<NodeClaim>(&ObjectKey::cluster("a")).unwrap()).clone();
    cluster.replace(claim).await.unwrap();
    assert_eq!(cached_version(&cluster, "a").as_deref(), Some("11"));
    go.send(()).unwrap();
    eventually(|| cluster.list::<NodeClaim>().is_empty()).await;
    assert!(cluster.get::<NodeClaim>(&ObjectKey::cluster("a")).is_none());
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_transform_slims_each_pod_before_it_is_stored() {
    let (mut cluster, mut api) = mock_cluster();
    cluster
        .watch_with::<SlimPod>(WatchOptions::default().transform(crate::cluster::slim::pod))
        .unwrap();
    let server = tokio::spawn(async move {
        let mut listed = pod("web", "a", "1");
        listed["metadata"]["managedFields"] = json!([{ "manager": "kubelet" }]);
        listed["metadata"]["annotations"] = json!({
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
            "karpenter.sh/do-not-disrupt": "true",
        });
        listed["status"] = json!({
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
            ],
        });
        let mut watch = api.serve_list("/api/v1/pods", "10", vec![listed]).await;
        let mut added = pod("web", "b", "11");
        added["spec"]["containers"][0]["env"] = json!([{ "name": "A", "value": "1" }]);
        watch.send("ADDED", added).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
    });
    synced(&cluster).await;
    eventually(|| cluster.list::<SlimPod>().len() == 2).await;
    let a = cluster.get::<SlimPod>(&ObjectKey::new("web", "a")).unwrap();
    assert!(a.metadata.managed_fields.is_none());
    let annotations: Vec<&String> = a
        .metadata
        .annotations
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(annotations, ["karpenter.sh/do-not-disrupt"]);
    let status = a.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let conditions: Vec<&str> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(conditions, ["Ready"]);
    let b = cluster.get::<SlimPod>(&ObjectKey::new("web", "b")).unwrap();
    let c = &b.spec.as_ref().unwrap().containers[0];
    assert_eq!(c.name, "app");
    // Nothing else of the container is kept: this one has no resources
    // and no host port, so its JSON is its name.
    let json = serde_json::to_value(c).unwrap();
    assert!(
        json.get("env").is_none() && json.get("image").is_none(),
        "{json}"
    );
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn watch_in_lists_one_namespace_by_field() {
    use k8s_openapi::api::coordination::v1::Lease;
    let (mut cluster, mut api) = mock_cluster();
    cluster
        .watch_in::<Lease>(
            "dovetail",
            WatchOptions::default().fields("metadata.name=dovetail-controller"),
        )
        .unwrap();
    let server = tokio::spawn(async move {
        let path = "/apis/coordination.k8s.io/v1/namespaces/dovetail/leases";
        let selector = "fieldSelector=metadata.name%3Ddovetail-controller";
        api.expect(Method::GET, &format!("{path}?&{selector}&limit=500"))
            .await
            .respond(200, list("5", Vec::new()));
        let watch = api
            .expect(
                Method::GET,
                &format!(
                    "{path}?&watch=true&timeoutSeconds=290&{selector}&allowWatchBookmarks=true&resourceVersion=5"
                ),
            )
            .await
            .respond_watch();
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(watch);
    });
    synced(&cluster).await;
    assert!(cluster.is_synced());
    assert!(cluster.list::<Lease>().is_empty());
    server.await.unwrap();
}

// ------------------------------------------ the controller's own requests

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/dovetail/leases";

fn lease(holder: Option<&str>, resource_version: &str, transitions: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": { "name": "dovetail-leader", "namespace": "dovetail", "resourceVersion": resource_version },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-11-21T12:00:00.000000Z",
            "renewTime": "2026-11-21T12:00:00.000000Z",
            "leaseTransitions": transitions,
        },
    })
}

/// A cluster watching the election's Lease, synced with `items`.
async fn lease_cluster(items: Vec<Value>) -> (Arc<KubeCluster>, ApiServer, WatchStream) {
    use k8s_openapi::api::coordination::v1::Lease;
    let (mut cluster, mut api) = mock_cluster();
    cluster
        .watch_in::<Lease>(
            "dovetail",
            WatchOptions::default().fields("metadata.name=dovetail-leader"),
        )
        .unwrap();
    let selector = "fieldSelector=metadata.name%3Ddovetail-leader";
    let serve = async {
        api.expect(Method::GET, &format!("{LEASES}?&{selector}&limit=500"))
            .await
            .respond(200, list("5", items));
        api.expect(
            Method::GET,
            &format!(
                "{LEASES}?&watch=true&timeoutSeconds=290&{selector}&allowWatchBookmarks=true&resourceVersion=5"
            ),
        )
        .await
        .respond_watch()
    };
    let (watch, ()) = tokio::join!(serve, synced(&cluster));
    (Arc::new(cluster), api, watch)
}

fn elector(
    cluster: &Arc<KubeCluster>,
    identity: &str,
) -> crate::controller::leader::Elector<KubeCluster> {
    use crate::clock::{ManualClock, Timestamp};
    crate::controller::leader::Elector::new(
        cluster.clone(),
        Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH)),
        crate::controller::leader::LeaseConfig::new("dovetail", "dovetail-leader", identity),
    )
}

#[tokio::test(start_paused = true)]
async fn leader_election_creates_renews_and_releases_its_lease() {
    let (cluster, mut api, _watch) = lease_cluster(Vec::new()).await;
    let mut a = elector(&cluster, "a");
    let server = tokio::spawn(async move {
        // Acquire: the Lease does not exist, so it is created.
        let x = api.expect(Method::POST, &format!("{LEASES}?")).await;
        assert_eq!(x.body["metadata"]["name"], "dovetail-leader");
        assert_eq!(x.body["spec"]["holderIdentity"], "a");
        assert_eq!(x.body["spec"]["leaseDurationSeconds"], 15);
        assert_eq!(x.body["spec"]["leaseTransitions"], 0);
        x.respond(201, lease(Some("a"), "6", 0));
        // Renew: an update of the version it wrote, read back from the
        // cache before the watch delivers it.
        let x = api
            .expect(Method::PUT, &format!("{LEASES}/dovetail-leader?"))
            .await;
        assert_eq!(x.body["metadata"]["resourceVersion"], "6");
        assert_eq!(x.body["spec"]["holderIdentity"], "a");
        x.respond(200, lease(Some("a"), "7", 0));
        // A renewal the server fails (500) is an error, not a lost lease.
        api.expect(Method::PUT, &format!("{LEASES}/dovetail-leader?"))
            .await
            .respond(
                500,
                status(500, "InternalError", "etcd timeout", json!(null)),
            );
        // Release: no holder, a one-second lease.
        let x = api
            .expect(Method::PUT, &format!("{LEASES}/dovetail-leader?"))
            .await;
        assert_eq!(x.body["metadata"]["resourceVersion"], "7");
        assert_eq!(x.body["spec"].get("holderIdentity"), None);
        assert_eq!(x.body["spec"]["leaseDurationSeconds"], 1);
        x.respond(200, lease(None, "8", 0));
    });
    assert!(a.try_acquire_or_renew().await.unwrap());
    assert!(a.try_acquire_or_renew().await.unwrap());
    let e = a.try_acquire_or_renew().await.unwrap_err();
    assert_eq!(e.code(), 500);
    assert!(a.is_leader());
    a.release().await.unwrap();
    assert!(!a.is_leader());
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn leader_election_stands_by_when_it_loses_the_race_to_create_or_take_the_lease() {
    let (cluster, mut api, mut watch) = lease_cluster(Vec::new()).await;
    let mut b = elector(&cluster, "b");
    let server = tokio::spawn(async move {
        // Another replica created it first: 409 AlreadyExists.
        api.expect(Method::POST, &format!("{LEASES}?"))
            .await
            .respond(
                409,
                status(
                    409,
                    "AlreadyExists",
                    "leases.coordination.k8s.io \"dovetail-leader\" already exists",
                    details(
                        "dovetail-leader",
                        "leases",
                        "coordination.k8s.io",
                        json!(null),
                    ),
                ),
            );
        // It sees the winner's lease; once that lease is released, its
        // update races another standby's and conflicts (409).
        watch.send("ADDED", lease(Some("a"), "6", 0)).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        watch.send("MODIFIED", lease(None, "7", 0)).await;
        let x = api
            .expect(Method::PUT, &format!("{LEASES}/dovetail-leader?"))
            .await;
        assert_eq!(x.body["spec"]["holderIdentity"], "b");
        assert_eq!(x.body["spec"]["leaseTransitions"], 1);
        x.respond(
            409,
            status(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version and try again",
                details("dovetail-leader", "leases", "coordination.k8s.io", json!(null)),
            ),
        );
        watch
    });
    assert!(!b.try_acquire_or_renew().await.unwrap());
    eventually(|| {
        cluster
            .get::<k8s_openapi::api::coordination::v1::Lease>(&ObjectKey::new(
                "dovetail",
                "dovetail-leader",
            ))
            .is_some()
    })
    .await;
    // A fresh lease held by a: no request at all.
    assert!(!b.try_acquire_or_renew().await.unwrap());
    eventually(|| {
        cluster
            .get::<k8s_openapi::api::coordination::v1::Lease>(&ObjectKey::new(
                "dovetail",
                "dovetail-leader",
            ))
            .is_some_and(|l| l.spec.as_ref().unwrap().holder_identity.is_none())
    })
    .await;
    assert!(!b.try_acquire_or_renew().await.unwrap());
    assert!(!b.is_leader());
    let _watch = server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn tainting_a_node_puts_it_with_the_taint_and_its_resource_version() {
    use k8s_openapi::api::core::v1::Node;
    let (cluster, mut api) = mock_cluster();
    let node: Node = from_json(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": "n1", "resourceVersion": "11", "labels": { "karpenter.sh/nodepool": "general" } },
        "spec": { "providerID": "aws:///us-east-1a/i-1", "taints": [{ "key": "dedicated", "value": "gpu", "effect": "NoSchedule" }] },
    }));
    let server = tokio::spawn(async move {
        let x = api.expect(Method::PUT, "/api/v1/nodes/n1?").await;
        assert_eq!(x.body["metadata"]["resourceVersion"], "11");
        assert_eq!(
            x.body["spec"]["taints"],
            json!([
                { "key": "dedicated", "value": "gpu", "effect": "NoSchedule" },
                { "key": "karpenter.sh/disrupted", "effect": "NoSchedule" },
            ])
        );
        assert_eq!(
            x.body["metadata"]["labels"]["karpenter.sh/nodepool"],
            "general"
        );
        let answer = x.body.clone();
        x.respond(200, answer);
    });
    crate::controller::taint_disrupted(&cluster, &node).await;
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn decisions_are_posted_as_events_in_the_objects_namespace() {
    use crate::controller::Event;
    use crate::controller::runtime::EventRecorder;
    let (cluster, mut api) = mock_cluster();
    let t = crate::clock::Timestamp::UNIX_EPOCH;
    let event = |object: &str, reason: &str| Event {
        t,
        kind: object.split('/').next().unwrap().into(),
        object: object.into(),
        reason: reason.into(),
        message: "why".into(),
        related: Vec::new(),
    };
    let server = tokio::spawn(async move {
        let x = api
            .expect(Method::POST, "/api/v1/namespaces/default/events?")
            .await;
        assert_eq!(x.body["metadata"]["generateName"], "general-1.");
        assert_eq!(
            x.body["involvedObject"],
            json!({ "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "general-1" })
        );
        assert_eq!(x.body["reason"], "LaunchFailed");
        assert_eq!(x.body["type"], "Warning");
        assert_eq!(x.body["reportingComponent"], "dovetail.dev/controller");
        let answer = x.body.clone();
        x.respond(201, answer);
        let x = api
            .expect(Method::POST, "/api/v1/namespaces/web/events?")
            .await;
        assert_eq!(
            x.body["involvedObject"],
            json!({ "apiVersion": "v1", "kind": "Pod", "namespace": "web", "name": "p" })
        );
        assert_eq!(x.body["reason"], "FailedProvisioning");
        // Events are best effort: a failure is logged, not retried.
        x.respond(
            500,
            status(500, "InternalError", "etcd timeout", json!(null)),
        );
    });
    let recorder = EventRecorder::new("replica-a");
    let written = recorder
        .record(
            &cluster,
            &[
                event("NodeClaim/general-1", "LaunchFailed"),
                event("Pod/web/p", "FailedProvisioning"),
            ],
            t,
        )
        .await;
    server.await.unwrap();
    assert_eq!(written, 1);
}

/// The controller deletes pods through their [`SlimPod`] view: the request
/// is the pod's, and the cache shows the answer at once.
#[tokio::test(start_paused = true)]
async fn a_pod_deleted_through_its_view_is_a_pod_delete() {
    let (mut cluster, mut api) = mock_cluster();
    cluster
        .watch_with::<SlimPod>(WatchOptions::default().transform(crate::cluster::slim::pod))
        .unwrap();
    let server = tokio::spawn(async move {
        let watch = api
            .serve_list("/api/v1/pods", "10", vec![pod("web", "p", "1")])
            .await;
        let mut terminating = pod("web", "p", "12");
        terminating["metadata"]["deletionTimestamp"] = json!("2026-11-21T12:00:00Z");
        terminating["metadata"]["finalizers"] = json!(["example.com/hold"]);
        api.expect(Method::DELETE, "/api/v1/namespaces/web/pods/p?")
            .await
            .respond(200, terminating);
        drop(watch);
    });
    synced(&cluster).await;
    let outcome = cluster.delete::<SlimPod>(&ObjectKey::new("web", "p")).await;
    server.await.unwrap();
    let outcome = outcome.unwrap();
    assert!(
        !outcome.is_deleted(),
        "terminating while its finalizer holds"
    );
    let cached = cluster.get::<SlimPod>(&ObjectKey::new("web", "p")).unwrap();
    assert!(cached.metadata.deletion_timestamp.is_some());
    assert_eq!(cached.metadata.resource_version.as_deref(), Some("12"));
}
