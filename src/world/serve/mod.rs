//! `dovetail simulate --serve`: the in-memory cluster served as a
//! Kubernetes API over HTTP on a loopback address, so that kubectl, k9s and
//! the production `dovetail controller` (through a real `kube::Client`) can
//! use it.
//!
//! The served API is the [`MemoryCluster`] the simulation runs on: the same
//! store, admission, resource versions, finalizers, garbage collection and
//! eviction rules, so the served answers and the in-process ones cannot
//! differ. This module adds what HTTP clients need on top, as the API
//! server documents it (<https://kubernetes.io/docs/reference/using-api/api-concepts/>):
//! - discovery: `/version`, `/api`, `/apis`, and each group version's
//!   resources with their verbs, short names and subresources;
//! - list with label and field selectors, `limit` and `continue` (pages
//!   come from the snapshot of the first page, as etcd serves them), and
//!   Tables for `kubectl get`;
//! - watch as newline-delimited JSON events, with bookmarks, initial
//!   events (`sendInitialEvents`), selectors (an object leaving the
//!   selection is a `DELETED` event) and `410 Expired` for a compacted
//!   resource version;
//! - create, update, the `status` subresource, delete with preconditions,
//!   propagation and grace periods, merge, JSON and strategic merge patch,
//!   server-side apply, `pods/eviction`, `pods/binding` and `dryRun=All`;
//! - `Status` bodies with the API server's codes and reasons;
//! - faults on demand ([`crate::world::faults`]).
//!
//! The parts: `serve::kinds` (each served kind a type-erased `ServedKind` over
//! the typed store: JSON in, typed write, JSON out; undeclared fields found by
//! what decoding drops); routing, discovery and an OpenAPI v3 index with each
//! kind's PATCH parameters, and list pages from snapshots kept per `continue`
//! token (here); `serve::watch` (events from the store's watch log);
//! `serve::table`; `serve::patch`; `serve::query` (field selectors as
//! `fields.ParseSelector` reads them, label selectors through
//! `cluster::Selector::parse`); `serve::protobuf`; and
//! `serve::token`. No authentication: it listens on loopback only.
//! `tests/serve.rs` runs the production `dovetail controller` against it.

pub mod kinds;
pub mod patch;
pub mod protobuf;
pub mod query;
pub mod table;
mod token;
mod watch;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use k8s_openapi::api::core::v1::Namespace;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::faults::Faults;
use crate::cluster::{ApiError, ApplyParams, DeleteParams, ObjectKey, Preconditions, Propagation};
use crate::world::MemoryCluster;
use kinds::{Kinds, ServedKind, Stored};
use patch::PatchType;
use query::Query;
use table::Printers;

/// The kinds without a `status` subresource (they have no status).
const WITHOUT_STATUS: [&str; 8] = [
    "ConfigMap",
    "Secret",
    "Event",
    "ServiceAccount",
    "PodTemplate",
    "Lease",
    "StorageClass",
    "CSINode",
];

/// The kinds with a `scale` subresource.
const SCALABLE: [&str; 3] = ["Deployment", "ReplicaSet", "StatefulSet"];

/// A workload's `autoscaling/v1` Scale.
fn scale_of(o: &Value) -> Value {
    let selector = o
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": o.pointer("/metadata/name"),
            "namespace": o.pointer("/metadata/namespace"),
            "uid": o.pointer("/metadata/uid"),
            "resourceVersion": o.pointer("/metadata/resourceVersion"),
            "creationTimestamp": o.pointer("/metadata/creationTimestamp"),
        },
        "spec": {"replicas": o.pointer("/spec/replicas").cloned().unwrap_or(json!(1))},
        "status": {
            "replicas": o.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            "selector": selector,
        },
    })
}

/// The largest request body the API server accepts (3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;
/// How long a `continue` token stays valid, as etcd's compaction interval.
const CONTINUE_TTL: Duration = Duration::from_secs(300);
/// How often the server retries an unconditional patch that lost a race.
const PATCH_RETRIES: usize = 5;

/// The body of every response.
pub type Body = BoxBody<Bytes, Infallible>;

/// What the served API needs beyond the cluster.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// `v1.33`-style or `1.33` Kubernetes version for `/version`.
    pub kubernetes_version: String,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_every: Duration,
    /// Where each write request is recorded, one JSON line each, as the
    /// API server's audit log at the `Metadata` level records it (see
    /// [`ApiServer::audit`]).
    pub audit: Option<Arc<Mutex<std::fs::File>>>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            kubernetes_version: "1.33".into(),
            bookmark_every: Duration::from_secs(60),
            audit: None,
        }
    }
}

/// A `continue` token's snapshot: the rest of a paged list.
struct Page {
    items: Arc<[Stored]>,
    /// Where the next page starts in `items`.
    offset: usize,
    resource_version: u64,
    created: Instant,
}

/// The served API.
pub struct ApiServer {
    cluster: Arc<MemoryCluster>,
    kinds: Kinds,
    printers: Printers,
    options: ServeOptions,
    faults: Faults,
    pages: Mutex<BTreeMap<u64, Page>>,
    next_page: Mutex<u64>,
}

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Version,
    Api,
    Apis,
    Group(String),
    Resources(String, String),
    Health,
    OpenApi(Option<String>),
    NotFound,
    Object {
        group: String,
        version: String,
        namespace: Option<String>,
        plural: String,
        name: Option<String>,
        sub: Option<String>,
    },
}

fn route(kinds: &Kinds, path: &str) -> Route {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(query::decode)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Route::Version,
        ["healthz" | "livez" | "readyz", ..] => return Route::Health,
        ["api"] => return Route::Api,
        ["apis"] => return Route::Apis,
        ["apis", g] => return Route::Group((*g).into()),
        ["openapi", "v3"] => return Route::OpenApi(None),
        ["openapi", "v3", rest @ ..] => return Route::OpenApi(Some(rest.join("/"))),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFound,
    };
    if !kinds
        .group_versions()
        .iter()
        .any(|(g, v)| g == group && v == version)
    {
        return Route::NotFound;
    }
    let namespaced = |plural: &str| {
        kinds
            .find(group, version, plural)
            .is_some_and(|k| k.meta().namespaced)
    };
    let object = |namespace: Option<&str>, rest: &[&str]| Route::Object {
        group: group.into(),
        version: version.into(),
        namespace: namespace.map(Into::into),
        plural: rest[0].into(),
        name: rest.get(1).map(|s| (*s).into()),
        sub: rest.get(2).map(|s| (*s).into()),
    };
    match rest {
        [] => Route::Resources(group.into(), version.into()),
        ["namespaces", ns, plural, more @ ..] if namespaced(plural) && more.len() <= 2 => {
            let mut r = vec![*plural];
            r.extend_from_slice(more);
            object(Some(ns), &r)
        }
        r if r.len() <= 3 => object(None, r),
        _ => Route::NotFound,
    }
}

fn json_response(code: u16, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed());
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache, private"),
    );
    r
}

fn value_response(code: u16, v: &Value) -> Response<Body> {
    json_response(code, serde_json::to_vec(v).unwrap_or_default())
}

/// The `Status` of a failure, with the HTTP code, and a `Retry-After`
/// header when the status suggests one.
fn status_response(
    code: u16,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Response<Body> {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    let retry_after = details
        .as_ref()
        .and_then(|d| d.get("retryAfterSeconds"))
        .and_then(Value::as_u64)
        .filter(|s| *s > 0);
    if let Some(d) = details {
        body["details"] = d;
    }
    let mut r = value_response(code, &body);
    if let Some(s) = retry_after
        && let Ok(v) = header::HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// The `Status` of an [`ApiError`], as the API server writes it. An
/// eviction refused by a budget carries its reason as a cause, as the
/// eviction subresource does.
pub fn error_response(e: &ApiError) -> Response<Body> {
    let status = kube::core::Status::from(e.clone());
    let details = status.details.as_ref().map(|d| {
        let mut v = json!({});
        for (field, value) in [("name", &d.name), ("group", &d.group), ("kind", &d.kind)] {
            if !value.is_empty() {
                v[field] = value.clone().into();
            }
        }
        if d.retry_after_seconds > 0 {
            v["retryAfterSeconds"] = d.retry_after_seconds.into();
        }
        if !d.causes.is_empty() {
            // A cause without a field (a budget's) has no `field` key.
            v["causes"] = d
                .causes
                .iter()
                .map(|c| {
                    let mut cause = json!({"reason": c.reason, "message": c.message});
                    if !c.field.is_empty() {
                        cause["field"] = c.field.clone().into();
                    }
                    cause
                })
                .collect();
        }
        v
    });
    status_response(status.code, &status.reason, &status.message, details)
}

fn success_status(code: u16, details: Option<Value>) -> Response<Body> {
    let mut body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code});
    if let Some(d) = details {
        body["details"] = d;
    }
    value_response(code, &body)
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        message: message.into(),
    }
}

/// `plural` or `plural/subresource`, as RBAC and the audit log name it.
fn resource_path(kind: &dyn ServedKind, target: &Target) -> String {
    match &target.sub {
        Some(s) => format!("{}/{s}", kind.meta().plural),
        None => kind.meta().plural.clone(),
    }
}

/// The Accept header asks for a Table.
fn wants_table(req: &Request<Incoming>) -> bool {
    req.headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|m| m.contains("as=Table")))
}

/// The encoding a client accepts for a resource's answer, from its
/// `Accept` header, as the API server negotiates it: the first media type
/// it names that the server writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    Json,
    /// Protobuf where the kind has a message, JSON otherwise (the client
    /// also accepts JSON, as client-go's `application/vnd.kubernetes.protobuf, */*`).
    Protobuf,
    /// Protobuf only: a kind without a message (a custom resource) is 406.
    ProtobufOnly,
}

fn negotiate(req: &Request<Incoming>) -> Wire {
    let ranges: Vec<String> = req
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|m| {
            m.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|m| !m.is_empty())
        .collect();
    let json = |m: &str| {
        matches!(
            m,
            "application/json" | "*/*" | "application/*" | "application/yaml"
        )
    };
    match ranges.iter().position(|m| protobuf::is_protobuf(m)) {
        Some(i) if ranges[..i].iter().any(|m| json(m)) => Wire::Json,
        Some(i) if ranges[i..].iter().any(|m| json(m)) => Wire::Protobuf,
        Some(_) => Wire::ProtobufOnly,
        None => Wire::Json,
    }
}

/// 406, as the API server answers a client that accepts only what the
/// resource cannot be written as.
fn not_acceptable() -> Response<Body> {
    status_response(
        406,
        "NotAcceptable",
        "the server was unable to respond with a content type that the client supports",
        None,
    )
}

/// A JSON answer written in protobuf for a client that asked for it:
/// objects, lists and `Status` of the built-in kinds. Other answers stay
/// JSON, or are 406 when the client takes nothing but protobuf.
async fn encode_answer(response: Response<Body>, wire: Wire) -> Response<Body> {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if wire == Wire::Json || !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(collected) = body.collect().await;
    let bytes = collected.to_bytes();
    let encoded = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| protobuf::encode(&v));
    match encoded {
        Some(Ok(body)) => {
            parts.headers.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(protobuf::MEDIA_TYPE),
            );
            Response::from_parts(parts, Full::new(Bytes::from(body)).boxed())
        }
        Some(Err(error)) => {
            tracing::warn!(%error, "cannot write an answer in protobuf");
            status_response(
                500,
                "InternalError",
                &format!("the answer could not be written in protobuf: {error}"),
                None,
            )
        }
        None if wire == Wire::ProtobufOnly => not_acceptable(),
        None => Response::from_parts(parts, Full::new(bytes).boxed()),
    }
}

impl ApiServer {
    pub fn new(cluster: Arc<MemoryCluster>, options: ServeOptions, faults: Faults) -> Arc<Self> {
        Arc::new(ApiServer {
            cluster,
            kinds: Kinds::standard(),
            printers: Printers::new(),
            options,
            faults,
            pages: Mutex::new(BTreeMap::new()),
            next_page: Mutex::new(0),
        })
    }

    pub fn cluster(&self) -> &Arc<MemoryCluster> {
        &self.cluster
    }

    /// Serves connections on `listener` until `shutdown` resolves.
    pub async fn run(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = &mut shutdown => return,
            };
            let Ok((stream, _)) = accepted else {
                continue;
            };
            let server = self.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let server = server.clone();
                    async move { Ok::<_, Infallible>(server.handle(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    /// Answers one request.
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let path = req.uri().path().to_string();
        let query = Query::parse(req.uri().query());
        match route(&self.kinds, &path) {
            Route::Version => value_response(200, &self.version()),
            Route::Health => json_response(200, b"ok".to_vec()),
            Route::Api => value_response(
                200,
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}),
            ),
            Route::Apis => value_response(200, &self.group_list()),
            Route::Group(g) => match self.group(&g) {
                Some(v) => value_response(200, &v),
                None => not_found_path(),
            },
            Route::Resources(g, v) => value_response(200, &self.resources(&g, &v)),
            Route::OpenApi(None) => value_response(200, &self.openapi_root()),
            Route::OpenApi(Some(gv)) => match self.openapi_group_version(&gv) {
                Some(doc) => value_response(200, &doc),
                None => not_found_path(),
            },
            Route::NotFound => not_found_path(),
            Route::Object {
                group,
                version,
                namespace,
                plural,
                name,
                sub,
            } => {
                let Some(kind) = self.kinds.find(&group, &version, &plural) else {
                    return not_found_path();
                };
                let target = Target {
                    namespace: namespace.filter(|_| kind.meta().namespaced),
                    name,
                    sub,
                };
                // `/api/v1/pods/x`: only lists and watches span namespaces.
                if kind.meta().namespaced
                    && target.namespace.is_none()
                    && (target.name.is_some() || req.method() == Method::POST)
                {
                    return not_found_path();
                }
                self.resource(req, kind, target, query).await
            }
        }
    }

    fn version(&self) -> Value {
        let v = self.options.kubernetes_version.trim_start_matches('v');
        let mut parts = v.split('.');
        let major = parts.next().unwrap_or("1");
        let minor = parts.next().unwrap_or("0");
        let git = if v.split('.').count() >= 3 {
            format!("v{v}")
        } else {
            format!("v{major}.{minor}.0")
        };
        json!({
            "major": major,
            "minor": minor,
            "gitVersion": git,
            "gitCommit": "",
            "gitTreeState": "clean",
            "buildDate": "",
            "goVersion": "",
            "compiler": "dovetail",
            "platform": format!("{}/{}", std::env::consts::OS, match std::env::consts::ARCH { "x86_64" => "amd64", "aarch64" => "arm64", a => a }),
        })
    }

    /// The OpenAPI v3 index: one document per group version.
    fn openapi_root(&self) -> Value {
        let mut paths = serde_json::Map::new();
        for (g, v) in self.kinds.group_versions() {
            let key = if g.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{g}/{v}")
            };
            paths.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash=dovetail")}),
            );
        }
        json!({"paths": paths})
    }

    /// A group version's OpenAPI v3 document: each kind's object path with
    /// its PATCH operation and the query parameters it takes, which is what
    /// kubectl reads to learn that the server validates fields
    /// (`fieldValidation`). Schemas are not included.
    fn openapi_group_version(&self, gv: &str) -> Option<Value> {
        let (group, version) = match gv.split('/').collect::<Vec<_>>().as_slice() {
            ["api", v] => (String::new(), (*v).to_string()),
            ["apis", g, v] => ((*g).to_string(), (*v).to_string()),
            _ => return None,
        };
        let mut paths = serde_json::Map::new();
        for k in self.kinds.iter() {
            let m = k.meta();
            if m.group != group || m.version != version {
                continue;
            }
            let prefix = if group.is_empty() {
                format!("/api/{version}")
            } else {
                format!("/apis/{group}/{version}")
            };
            let path = if m.namespaced {
                format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", m.plural)
            } else {
                format!("{prefix}/{}/{{name}}", m.plural)
            };
            let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
            let gvk = json!({"group": m.group, "version": m.version, "kind": m.kind});
            let op = |id: &str| {
                json!({
                    "operationId": format!("{id}{}", m.kind),
                    "x-kubernetes-group-version-kind": gvk,
                    "parameters": [query("dryRun"), query("fieldManager"), query("fieldValidation"), query("force")],
                    "responses": {"200": {"description": "OK"}},
                })
            };
            paths.insert(path, json!({"get": op("read"), "put": op("replace"), "patch": op("patch"), "delete": op("delete")}));
        }
        if paths.is_empty() {
            return None;
        }
        Some(json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": self.version()["gitVersion"]},
            "paths": paths,
            "components": {},
        }))
    }

    fn group_json(&self, group: &str) -> Value {
        let versions: Vec<Value> = self
            .kinds
            .group_versions()
            .into_iter()
            .filter(|(g, _)| g == group)
            .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
            .collect();
        json!({
            "name": group,
            "versions": versions,
            "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
        })
    }

    fn group_list(&self) -> Value {
        let mut groups: Vec<String> = Vec::new();
        for (g, _) in self.kinds.group_versions() {
            if !g.is_empty() && !groups.contains(&g) {
                groups.push(g);
            }
        }
        json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": groups.iter().map(|g| self.group_json(g)).collect::<Vec<_>>(),
        })
    }

    fn group(&self, group: &str) -> Option<Value> {
        let g = self.group_json(group);
        if g["versions"].as_array().is_none_or(Vec::is_empty) {
            return None;
        }
        let mut g = g;
        g["kind"] = "APIGroup".into();
        g["apiVersion"] = "v1".into();
        Some(g)
    }

    fn resources(&self, group: &str, version: &str) -> Value {
        let mut resources = Vec::new();
        for k in self.kinds.iter() {
            let m = k.meta();
            if m.group != group || m.version != version {
                continue;
            }
            let mut verbs = vec![
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ];
            // Namespaces are deleted one by one, by the namespace
            // controller's finalizer.
            if m.kind == "Namespace" {
                verbs.retain(|v| *v != "deletecollection");
            }
            verbs.sort_unstable();
            let mut resource = json!({
                "name": m.plural,
                "singularName": m.singular(),
                "namespaced": m.namespaced,
                "kind": m.kind,
                "verbs": verbs,
            });
            // As the API server: empty lists are left out.
            if !m.short_names.is_empty() {
                resource["shortNames"] = json!(m.short_names);
            }
            if !m.categories.is_empty() {
                resource["categories"] = json!(m.categories);
            }
            resources.push(resource);
            if !WITHOUT_STATUS.contains(&m.kind.as_str()) {
                resources.push(json!({
                    "name": format!("{}/status", m.plural),
                    "singularName": "",
                    "namespaced": m.namespaced,
                    "kind": m.kind,
                    "verbs": ["get", "patch", "update"],
                }));
            }
            if SCALABLE.contains(&m.kind.as_str()) {
                resources.push(json!({
                    "name": format!("{}/scale", m.plural),
                    "singularName": "",
                    "namespaced": true,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }));
            }
            for sub in m.extra_subresources {
                let mut resource = json!({
                    "name": format!("{}/{sub}", m.plural),
                    "singularName": "",
                    "namespaced": m.namespaced,
                    "kind": "Binding",
                    "verbs": ["create"],
                });
                // A subresource of another group names it; Binding is the
                // pods' own group and version.
                let other = match *sub {
                    "eviction" => Some(("Eviction", "policy")),
                    "token" => Some(("TokenRequest", "authentication.k8s.io")),
                    _ => None,
                };
                if let Some((kind, group)) = other {
                    resource["kind"] = json!(kind);
                    resource["group"] = json!(group);
                    resource["version"] = json!("v1");
                }
                resources.push(resource);
            }
        }
        json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": if group.is_empty() { version.to_string() } else { format!("{group}/{version}") },
            "resources": resources,
        })
    }

    /// Answers a request for a resource in the encoding the client asked
    /// for.
    async fn resource(
        self: &Arc<Self>,
        req: Request<Incoming>,
        kind: &dyn ServedKind,
        target: Target,
        query: Query,
    ) -> Response<Body> {
        let wire = negotiate(&req);
        let response = self.audited(req, kind, target, query, wire).await;
        encode_answer(response, wire).await
    }

    /// Answers a request for a resource, and records writes in the audit
    /// log.
    async fn audited(
        self: &Arc<Self>,
        req: Request<Incoming>,
        kind: &dyn ServedKind,
        target: Target,
        query: Query,
        wire: Wire,
    ) -> Response<Body> {
        if self.options.audit.is_none() || matches!(*req.method(), Method::GET | Method::HEAD) {
            return self.resource_inner(req, kind, target, query, wire).await;
        }
        let method = req.method().to_string();
        let agent = req
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let resource = resource_path(kind, &target);
        let (namespace, name) = (target.namespace.clone(), target.name.clone());
        let response = self.resource_inner(req, kind, target, query, wire).await;
        self.audit(&json!({
            "stageTimestamp": crate::clock::format_rfc3339(self.cluster.clock().now()),
            "verb": method,
            "resource": resource,
            "namespace": namespace,
            "name": name,
            "code": response.status().as_u16(),
            "userAgent": agent,
        }));
        response
    }

    /// Appends one record to the audit log; a failed write is logged.
    fn audit(&self, record: &Value) {
        let Some(file) = &self.options.audit else {
            return;
        };
        let mut line = record.to_string();
        line.push('\n');
        let mut file = file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(error) = std::io::Write::write_all(&mut *file, line.as_bytes()) {
            tracing::warn!(%error, "cannot write the audit log");
        }
    }

    async fn resource_inner(
        self: &Arc<Self>,
        req: Request<Incoming>,
        kind: &dyn ServedKind,
        target: Target,
        query: Query,
        wire: Wire,
    ) -> Response<Body> {
        let method = req.method().clone();
        let verb = match (&method, &target.name, target.sub.as_deref()) {
            (&Method::GET, None, _) if query.flag("watch").unwrap_or(false) => "watch",
            (&Method::GET, None, _) => "list",
            (&Method::GET, Some(_), _) => "get",
            (&Method::POST, Some(_), Some("eviction")) => "evict",
            (&Method::POST, _, _) => "create",
            (&Method::PUT, _, _) => "update",
            (&Method::PATCH, _, _) => "patch",
            (&Method::DELETE, _, _) => "delete",
            _ => {
                return status_response(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                    None,
                );
            }
        };
        let resource = resource_path(kind, &target);
        let effect = self.faults.hit(verb, &resource);
        if !effect.latency.is_zero() {
            tokio::time::sleep(effect.latency).await;
        }
        if let Some((code, retry_after)) = effect.status {
            let (reason, message) = match code {
                429 => (
                    "TooManyRequests",
                    "the server has received too many requests and has asked us to try again later",
                ),
                503 => (
                    "ServiceUnavailable",
                    "the server is currently unable to handle the request",
                ),
                504 => (
                    "Timeout",
                    "the server was unable to return a response in the time allotted, but may still be processing the request",
                ),
                _ => (
                    "InternalError",
                    "an error on the server (\"injected fault\") has prevented the request from succeeding",
                ),
            };
            let details = retry_after.map(|s| json!({"retryAfterSeconds": s}));
            return status_response(code, reason, message, details);
        }
        let table = wants_table(&req);
        let mut content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_string();
        let mut body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return status_response(
                    413,
                    "RequestEntityTooLarge",
                    "the request body is too large",
                    None,
                );
            }
        };
        // A protobuf body is read into the JSON the API server would have
        // decoded from a JSON client; a kind without a message (a custom
        // resource) takes no protobuf.
        if protobuf::is_protobuf(&content_type) && !body.is_empty() {
            let decoded = match protobuf::decode(&body) {
                Ok(v) => v,
                Err(_) if !is_builtin(&kind.meta().group) => {
                    return error_response(&ApiError::UnsupportedMediaType {
                        message: "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml".into(),
                    });
                }
                Err(e) => {
                    return error_response(&bad(format!(
                        "the body of the request could not be decoded: {e}"
                    )));
                }
            };
            body = Bytes::from(serde_json::to_vec(&decoded).unwrap_or_default());
            content_type = "application/json".into();
        }
        if verb == "watch" {
            if wire == Wire::ProtobufOnly && !table && !kind.meta().has_protobuf() {
                return not_acceptable();
            }
            return match watch::start(
                self.clone(),
                kind,
                target.namespace.clone(),
                &query,
                table,
                wire != Wire::Json && !table && kind.meta().has_protobuf(),
                effect,
            ) {
                Ok(r) => r,
                Err(e) => error_response(&e),
            };
        }
        let result =
            self.clone()
                .dispatch(verb, kind, &target, &query, table, &content_type, &body);
        match result {
            Ok(response) => {
                if let Some(t) = effect.write_timeout
                    && matches!(verb, "create" | "update" | "patch" | "delete" | "evict")
                {
                    tokio::time::sleep(t).await;
                    return status_response(
                        504,
                        "Timeout",
                        "the server was unable to return a response in the time allotted, but may still be processing the request",
                        None,
                    );
                }
                response
            }
            Err(e) => error_response(&e),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        self: Arc<Self>,
        verb: &str,
        kind: &dyn ServedKind,
        target: &Target,
        query: &Query,
        table: bool,
        content_type: &str,
        body: &[u8],
    ) -> Result<Response<Body>, ApiError> {
        let c = &self.cluster;
        let meta = kind.meta();
        let key = || {
            ObjectKey::new(
                target.namespace.clone().unwrap_or_default(),
                target.name.clone().unwrap_or_default(),
            )
        };
        match (verb, target.sub.as_deref()) {
            ("list", _) => self.list(kind, target.namespace.as_deref(), query, table),
            ("get", None | Some("status")) => {
                let obj = kind.get(c, &key())?;
                if table {
                    let t = self.printers.table(
                        &meta.kind,
                        &[obj.to_json()],
                        obj.meta().resource_version.as_deref().unwrap_or_default(),
                        None,
                        query.get("includeObject").unwrap_or("Metadata"),
                        c.clock().now(),
                    );
                    return Ok(value_response(200, &t));
                }
                Ok(object_response(200, &obj))
            }
            ("create", None) => {
                let dry_run = query.dry_run()?;
                let obj = self.body_for(kind, target, body, false)?;
                let warnings = field_validation(kind, &obj, query)?;
                self.admit_create(kind, target)?;
                let obj = prepare_create(&meta.kind, obj);
                let stored = kind.create(c, obj, dry_run)?;
                Ok(with_warnings(object_response(201, &stored), &warnings))
            }
            ("evict", Some("eviction")) if meta.kind == "Pod" => self.evict(target, query, body),
            ("create", Some("token")) if meta.kind == "ServiceAccount" => {
                let account = kind.get(c, &key())?;
                let request =
                    token::issue(&account.to_json(), &parse_json(body)?, c.clock().now())?;
                Ok(value_response(201, &request))
            }
            ("create", Some("binding")) if meta.kind == "Pod" => {
                let b: Value = parse_json(body)?;
                let node = b
                    .pointer("/target/name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("Binding.target.name is required"))?;
                let key = key();
                c.bind(&key.namespace, &key.name, node)?;
                Ok(success_status(201, None))
            }
            ("update", None | Some("status")) => {
                let dry_run = query.dry_run()?;
                let obj = self.body_for(kind, target, body, true)?;
                let warnings = field_validation(kind, &obj, query)?;
                let stored = if target.sub.is_some() {
                    kind.replace_status(c, obj, dry_run)?
                } else {
                    kind.replace(c, obj, dry_run)?
                };
                Ok(with_warnings(object_response(200, &stored), &warnings))
            }
            ("patch", None | Some("status")) => self.patch(kind, target, query, content_type, body),
            ("get" | "update" | "patch", Some("scale"))
                if SCALABLE.contains(&meta.kind.as_str()) =>
            {
                self.scale(verb, kind, target, query, content_type, body)
            }
            ("delete", None) if target.name.is_some() => {
                let params = delete_params(query, body)?;
                let (gone, obj) = kind.delete(c, &key(), &params)?;
                if meta.kind == "Namespace" && gone {
                    self.delete_namespace_contents(&key().name);
                }
                // 202 only for a cascading delete that did not complete, as
                // the API server answers (handlers/delete.go): a pod in its
                // grace period, or an object held by finalizers, is 200.
                let cascading =
                    parse_json(body)?.get("orphanDependents") == Some(&Value::Bool(false));
                Ok(object_response(
                    if !gone && cascading { 202 } else { 200 },
                    &obj,
                ))
            }
            ("delete", None) => {
                // deletecollection
                let params = delete_params(query, body)?;
                let labels = query.labels()?;
                let fields = query.fields()?;
                fields.check(&meta.kind)?;
                let (items, rv) = kind.list(c, target.namespace.as_deref(), &labels);
                let mut deleted = Vec::new();
                for o in items.iter().filter(|o| fields.matches_object(o.as_ref())) {
                    let k = ObjectKey::new(
                        o.meta().namespace.clone().unwrap_or_default(),
                        o.meta().name.clone().unwrap_or_default(),
                    );
                    if let Ok((_, obj)) = kind.delete(c, &k, &params) {
                        deleted.push(obj);
                    }
                }
                Ok(list_response(meta, &deleted, rv, None, None))
            }
            _ => Err(ApiError::NotFound {
                resource: meta.resource(),
                key: key(),
            }),
        }
    }

    /// A list, paged with `limit` and `continue`, or as a Table.
    fn list(
        &self,
        kind: &dyn ServedKind,
        namespace: Option<&str>,
        query: &Query,
        table: bool,
    ) -> Result<Response<Body>, ApiError> {
        let meta = kind.meta();
        let c = &self.cluster;
        let labels = query.labels()?;
        let fields = query.fields()?;
        fields.check(&meta.kind)?;
        let limit = query.int("limit")?.filter(|l| *l > 0).map(|l| l as usize);
        let (items, offset, rv): (Arc<[Stored]>, usize, u64) =
            match query.get("continue").filter(|c| !c.is_empty()) {
                Some(token) => {
                    let id: u64 = token
                        .parse()
                        .map_err(|_| bad("continue key is not valid"))?;
                    let mut pages = self
                        .pages
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    match pages.remove(&id) {
                        Some(p) if p.created.elapsed() < CONTINUE_TTL => {
                            (p.items, p.offset, p.resource_version)
                        }
                        _ => return Ok(expired_continue()),
                    }
                }
                None => {
                    if let Some(rv) = query
                        .get("resourceVersion")
                        .filter(|v| !v.is_empty() && *v != "0")
                        && query.get("resourceVersionMatch") == Some("Exact")
                        && rv.parse::<u64>().ok() != Some(c.resource_version())
                    {
                        return Err(ApiError::Gone {
                            requested: rv.parse().unwrap_or(0),
                            oldest: c.resource_version(),
                        });
                    }
                    let (items, rv) = kind.list(c, namespace, &labels);
                    let items: Vec<Stored> = if fields.is_empty() {
                        items
                    } else {
                        items
                            .into_iter()
                            .filter(|o| fields.matches_object(o.as_ref()))
                            .collect()
                    };
                    (items.into(), 0, rv)
                }
            };
        // A page is a window on the first page's snapshot.
        let end = limit.map_or(items.len(), |l| offset.saturating_add(l).min(items.len()));
        let page = &items[offset.min(end)..end];
        let cont = (end < items.len()).then(|| {
            let mut next = self
                .next_page
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *next += 1;
            let id = *next;
            let mut pages = self
                .pages
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            pages.retain(|_, p| p.created.elapsed() < CONTINUE_TTL);
            pages.insert(
                id,
                Page {
                    items: items.clone(),
                    offset: end,
                    resource_version: rv,
                    created: Instant::now(),
                },
            );
            id.to_string()
        });
        // As the API server: the count is left out where a selector
        // filtered the list, since it could not know it cheaply.
        let remaining = cont
            .as_ref()
            .filter(|_| labels.is_everything() && fields.is_empty())
            .map(|_| items.len() - end);
        if table {
            let objects: Vec<Value> = page.iter().map(|o| o.to_json()).collect();
            let t = self.printers.table(
                &meta.kind,
                &objects,
                &rv.to_string(),
                cont.as_deref(),
                query.get("includeObject").unwrap_or("Metadata"),
                c.clock().now(),
            );
            return Ok(value_response(200, &t));
        }
        Ok(list_response(meta, page, rv, cont.as_deref(), remaining))
    }

    /// The request body as the object to write: the URL's namespace and
    /// name filled in, and refused when they disagree.
    fn body_for(
        &self,
        kind: &dyn ServedKind,
        target: &Target,
        body: &[u8],
        named: bool,
    ) -> Result<Value, ApiError> {
        let mut obj: Value = parse_json(body)?;
        let meta = obj
            .as_object_mut()
            .ok_or_else(|| bad("the body of the request must be a JSON object"))?
            .entry("metadata")
            .or_insert_with(|| json!({}));
        let m = meta
            .as_object_mut()
            .ok_or_else(|| bad("metadata must be an object"))?;
        if kind.meta().namespaced {
            let url_ns = target.namespace.clone().unwrap_or_default();
            match m.get("namespace").and_then(Value::as_str) {
                Some(ns) if !ns.is_empty() && ns != url_ns => {
                    return Err(bad(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    m.insert("namespace".into(), url_ns.into());
                }
            }
        } else {
            m.remove("namespace");
        }
        if kind.meta().kind == "Secret" {
            fold_string_data(&mut obj)?;
            // The API server's default type.
            if let Some(map) = obj.as_object_mut()
                && map
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .is_empty()
            {
                map.insert("type".into(), "Opaque".into());
            }
        }
        Self::name_from_url(obj, target, named)
    }

    /// The URL's name filled in, and refused when the object names another.
    fn name_from_url(mut obj: Value, target: &Target, named: bool) -> Result<Value, ApiError> {
        let m = obj
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| bad("metadata must be an object"))?;
        if named {
            let url_name = target.name.clone().unwrap_or_default();
            match m.get("name").and_then(Value::as_str) {
                Some(n) if n != url_name => {
                    return Err(bad(format!(
                        "the name of the object ({n}) does not match the name on the URL ({url_name})"
                    )));
                }
                _ => {
                    m.insert("name".into(), url_name.into());
                }
            }
        }
        Ok(obj)
    }

    /// NamespaceLifecycle admission: a namespaced object is created only in
    /// a namespace that exists and is not terminating.
    fn admit_create(&self, kind: &dyn ServedKind, target: &Target) -> Result<(), ApiError> {
        let Some(ns) = target
            .namespace
            .as_deref()
            .filter(|_| kind.meta().namespaced)
        else {
            return Ok(());
        };
        match self.cluster.get_opt::<Namespace>(&ObjectKey::cluster(ns)) {
            None => Err(ApiError::NotFound {
                resource: "namespaces".into(),
                key: ObjectKey::cluster(ns),
            }),
            Some(n) if n.metadata.deletion_timestamp.is_some() => Err(ApiError::Invalid {
                resource: kind.meta().resource(),
                key: ObjectKey::new(ns, ""),
                messages: vec![format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                )],
            }),
            Some(_) => Ok(()),
        }
    }

    fn patch(
        &self,
        kind: &dyn ServedKind,
        target: &Target,
        query: &Query,
        content_type: &str,
        body: &[u8],
    ) -> Result<Response<Body>, ApiError> {
        let c = &self.cluster;
        let meta = kind.meta();
        let dry_run = query.dry_run()?;
        let Some(patch_type) = PatchType::of(content_type) else {
            return Err(unsupported_media());
        };
        let key = ObjectKey::new(
            target.namespace.clone().unwrap_or_default(),
            target.name.clone().unwrap_or_default(),
        );
        if patch_type == PatchType::Strategic && !is_builtin(&meta.group) {
            return Err(unsupported_media());
        }
        if patch_type == PatchType::Apply {
            let field_manager = query
                .get("fieldManager")
                .filter(|m| !m.is_empty())
                .ok_or_else(|| ApiError::Invalid {
                    resource: "PatchOptions.meta.k8s.io".into(),
                    key: ObjectKey::default(),
                    messages: vec![
                        "fieldManager: Required value: is required for apply patch".into(),
                    ],
                })?;
            let text =
                std::str::from_utf8(body).map_err(|_| bad("the apply patch is not UTF-8"))?;
            let obj: Value = serde_saphyr::from_str(text)
                .map_err(|e| bad(format!("error decoding YAML: {e}")))?;
            let obj = self.body_for(
                kind,
                target,
                serde_json::to_vec(&obj).unwrap_or_default().as_slice(),
                true,
            )?;
            let warnings = field_validation(kind, &obj, query)?;
            let existed = kind.get(c, &key).is_ok();
            if !existed {
                self.admit_create(kind, target)?;
            }
            let params = ApplyParams {
                field_manager: field_manager.into(),
                dry_run,
                force: query.flag("force")?,
            };
            let stored = kind.apply(c, obj, &params)?;
            return Ok(with_warnings(
                object_response(if existed { 200 } else { 201 }, &stored),
                &warnings,
            ));
        }
        let conditional = patch::sets_resource_version(patch_type, body);
        let mut attempt = 0;
        loop {
            let current = kind.get(c, &key)?;
            let patched =
                patch::apply(patch_type, &current.to_json(), body).map_err(|e| match e {
                    ApiError::Invalid { messages, .. } => ApiError::Invalid {
                        resource: meta.resource(),
                        key: key.clone(),
                        messages,
                    },
                    e => e,
                })?;
            let patched = self.body_for(
                kind,
                target,
                &serde_json::to_vec(&patched).unwrap_or_default(),
                true,
            )?;
            let warnings = field_validation(kind, &patched, query)?;
            let result = if target.sub.is_some() {
                kind.replace_status(c, patched, dry_run)
            } else {
                kind.replace(c, patched, dry_run)
            };
            match result {
                Err(e) if e.is_conflict() && !conditional && attempt + 1 < PATCH_RETRIES => {
                    attempt += 1
                }
                Err(e) => return Err(e),
                Ok(stored) => return Ok(with_warnings(object_response(200, &stored), &warnings)),
            }
        }
    }

    /// The `scale` subresource (`autoscaling/v1` Scale) of a workload:
    /// read, replaced or patched; a write sets the object's
    /// `spec.replicas`.
    fn scale(
        &self,
        verb: &str,
        kind: &dyn ServedKind,
        target: &Target,
        query: &Query,
        content_type: &str,
        body: &[u8],
    ) -> Result<Response<Body>, ApiError> {
        let c = &self.cluster;
        let key = ObjectKey::new(
            target.namespace.clone().unwrap_or_default(),
            target.name.clone().unwrap_or_default(),
        );
        let current = kind.get(c, &key)?.to_json();
        if verb == "get" {
            return Ok(value_response(200, &scale_of(&current)));
        }
        let wanted = match verb {
            "update" => parse_json(body)?,
            _ => {
                let Some(t) = PatchType::of(content_type).filter(|t| *t != PatchType::Apply) else {
                    return Err(unsupported_media());
                };
                patch::apply(t, &scale_of(&current), body)?
            }
        };
        if let Some(rv) = wanted
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            && Some(rv)
                != current
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
        {
            return Err(ApiError::Conflict {
                resource: kind.meta().resource(),
                key,
                message: "the object has been modified; please apply your changes to the latest version and try again".into(),
            });
        }
        let replicas = wanted
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .filter(|r| *r >= 0)
            .ok_or_else(|| ApiError::Invalid {
                resource: "Scale.autoscaling".into(),
                key: key.clone(),
                messages: vec![
                    "spec.replicas: Invalid value: must be greater than or equal to 0".into(),
                ],
            })?;
        let mut updated = current;
        updated["spec"]["replicas"] = json!(replicas);
        if let Some(m) = updated.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        let stored = kind.replace(c, updated, query.dry_run()?)?;
        Ok(value_response(200, &scale_of(&stored.to_json())))
    }

    fn evict(
        &self,
        target: &Target,
        query: &Query,
        body: &[u8],
    ) -> Result<Response<Body>, ApiError> {
        let eviction: Value = parse_json(body)?;
        let name = target.name.clone().unwrap_or_default();
        let namespace = target.namespace.clone().unwrap_or_default();
        if let Some(n) = eviction.pointer("/metadata/name").and_then(Value::as_str)
            && n != name
        {
            return Err(bad("name in URL does not match name in Eviction object"));
        }
        let options = eviction
            .get("deleteOptions")
            .cloned()
            .unwrap_or(Value::Null);
        let mut params = delete_options(&options)?;
        params.dry_run |= query.dry_run()?;
        self.cluster.evict_with(&namespace, &name, &params)?;
        Ok(success_status(201, None))
    }

    /// The namespace controller's work: everything in a removed namespace
    /// is deleted.
    fn delete_namespace_contents(&self, ns: &str) {
        for kind in self.kinds.iter().filter(|k| k.meta().namespaced) {
            let (items, _) = kind.list(
                &self.cluster,
                Some(ns),
                &crate::cluster::Selector::everything(),
            );
            for o in items {
                let key = ObjectKey::new(ns, o.meta().name.clone().unwrap_or_default());
                let _ = kind.delete(&self.cluster, &key, &DeleteParams::default());
            }
        }
    }
}

/// Where in a kind a request points.
#[derive(Debug, Clone)]
struct Target {
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

/// `fieldValidation`: `Strict` refuses undeclared fields (400), `Warn`
/// (the default) answers with a `Warning` header for each, `Ignore` drops
/// them silently.
fn field_validation(
    kind: &dyn ServedKind,
    obj: &Value,
    query: &Query,
) -> Result<Vec<String>, ApiError> {
    let mode = query.get("fieldValidation").unwrap_or("Warn");
    if !matches!(mode, "Strict" | "Warn" | "Ignore" | "") {
        return Err(bad(format!(
            "fieldValidation: Unsupported value: {mode:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
        )));
    }
    if mode == "Ignore" {
        return Ok(Vec::new());
    }
    let unknown = kind.unknown_fields(obj)?;
    let messages: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field \"{}\"", p.trim_start_matches('.')))
        .collect();
    if mode == "Strict" && !messages.is_empty() {
        let m = kind.meta();
        return Err(bad(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            m.kind,
            m.version,
            m.kind,
            messages.join(", ")
        )));
    }
    Ok(messages)
}

/// Adds a `Warning: 299 - "..."` header per message, as the API server
/// does.
fn with_warnings(mut r: Response<Body>, warnings: &[String]) -> Response<Body> {
    for w in warnings {
        let text = format!("299 - {:?}", w);
        if let Ok(v) = header::HeaderValue::from_str(&text) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

fn is_builtin(group: &str) -> bool {
    !group.contains('.') || group.ends_with(".k8s.io")
}

fn not_found_path() -> Response<Body> {
    status_response(
        404,
        "NotFound",
        "the server could not find the requested resource",
        Some(json!({})),
    )
}

/// 415, with the API server's message for a patch type the resource
/// does not take.
fn unsupported_media() -> ApiError {
    ApiError::UnsupportedMediaType {
        message: "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
    }
}

/// 410 for a `continue` token whose snapshot is gone, with the API
/// server's message.
fn expired_continue() -> Response<Body> {
    status_response(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
        None,
    )
}

/// A Secret's write-only `stringData`, merged into `data` (base64) over
/// the same keys, as the API server's conversion of a v1 Secret does.
fn fold_string_data(obj: &mut Value) -> Result<(), ApiError> {
    use base64::Engine as _;
    let Some(map) = obj.as_object_mut() else {
        return Ok(());
    };
    let Some(string_data) = map.remove("stringData") else {
        return Ok(());
    };
    let entries = match string_data {
        Value::Null => return Ok(()),
        Value::Object(entries) => entries,
        other => {
            return Err(bad(format!(
                "stringData must be an object of strings, found {other}"
            )));
        }
    };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if data.is_null() {
        *data = json!({});
    }
    let data = data
        .as_object_mut()
        .ok_or_else(|| bad("data must be an object of base64 strings"))?;
    for (k, v) in entries {
        let v = v
            .as_str()
            .ok_or_else(|| bad(format!("stringData[{k}] must be a string")))?;
        data.insert(
            k,
            base64::engine::general_purpose::STANDARD.encode(v).into(),
        );
    }
    Ok(())
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body)
        .map_err(|e| bad(format!("the body of the request could not be decoded: {e}")))
}

/// What a pod, or a kind with a status subresource, looks like when the
/// API server has created it: a pod starts `Pending` with its defaults,
/// and other kinds' status is reset.
fn prepare_create(kind: &str, mut obj: Value) -> Value {
    let Some(map) = obj.as_object_mut() else {
        return obj;
    };
    match kind {
        "Pod" => {
            let spec = map.entry("spec").or_insert_with(|| json!({}));
            if let Some(s) = spec.as_object_mut() {
                s.entry("terminationGracePeriodSeconds")
                    .or_insert(json!(30));
                s.entry("restartPolicy").or_insert(json!("Always"));
                s.entry("schedulerName")
                    .or_insert(json!("default-scheduler"));
                s.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
            }
            map.insert(
                "status".into(),
                json!({"phase": "Pending", "qosClass": "BestEffort"}),
            );
        }
        "Namespace" => {
            // The namespace registry's defaults: the name label, the
            // `kubernetes` finalizer, and an active phase.
            let name = map
                .get("metadata")
                .and_then(|m| m.get("name"))
                .cloned()
                .unwrap_or(Value::Null);
            if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
                let labels = meta.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), name);
                }
            }
            map.insert("spec".into(), json!({"finalizers": ["kubernetes"]}));
            map.insert("status".into(), json!({"phase": "Active"}));
        }
        "Node" | "Event" | "ConfigMap" | "Secret" | "Lease" | "StorageClass" | "ServiceAccount"
        | "CSINode" => {}
        _ => {
            map.remove("status");
        }
    }
    obj
}

fn delete_params(query: &Query, body: &[u8]) -> Result<DeleteParams, ApiError> {
    let options = parse_json(body)?;
    let mut p = delete_options(&options)?;
    if let Some(g) = query.int("gracePeriodSeconds")? {
        p.grace_period_seconds = Some(g);
    }
    if let Some(policy) = query.get("propagationPolicy") {
        p.propagation = propagation(policy)?;
    }
    p.dry_run |= query.dry_run()?;
    Ok(p)
}

/// A `propagationPolicy`, refused as the API server refuses others.
fn propagation(policy: &str) -> Result<Propagation, ApiError> {
    match policy {
        "Background" => Ok(Propagation::Background),
        "Foreground" => Ok(Propagation::Foreground),
        "Orphan" => Ok(Propagation::Orphan),
        other => Err(ApiError::Invalid {
            resource: "DeleteOptions.meta.k8s.io".into(),
            key: ObjectKey::default(),
            messages: vec![format!(
                "propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
            )],
        }),
    }
}

/// `DeleteOptions` from a JSON body (an Eviction's `deleteOptions`, or a
/// DELETE's body).
fn delete_options(v: &Value) -> Result<DeleteParams, ApiError> {
    if v.is_null() {
        return Ok(DeleteParams::default());
    }
    let dry_run = match v.get("dryRun") {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) if a.is_empty() => false,
        Some(Value::Array(a)) if a.iter().all(|x| x == "All") => true,
        Some(other) => {
            return Err(bad(format!(
                "Invalid dry run value: {other}: supported values: \"All\""
            )));
        }
    };
    Ok(DeleteParams {
        preconditions: Preconditions {
            uid: v
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(String::from),
            resource_version: v
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(String::from),
        },
        grace_period_seconds: v.get("gracePeriodSeconds").and_then(Value::as_i64),
        propagation: match v.get("propagationPolicy").and_then(Value::as_str) {
            Some(policy) => propagation(policy)?,
            None if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) => {
                Propagation::Orphan
            }
            None => Propagation::Background,
        },
        dry_run,
    })
}

fn object_response(code: u16, obj: &Stored) -> Response<Body> {
    let mut out = Vec::with_capacity(1024);
    obj.write_json(&mut out);
    json_response(code, out)
}

/// A `...List` of objects, written without building a JSON tree.
fn list_response(
    meta: &kinds::KindMeta,
    items: &[Stored],
    rv: u64,
    cont: Option<&str>,
    remaining: Option<usize>,
) -> Response<Body> {
    let mut out = Vec::with_capacity(256 + items.len() * 2048);
    let mut list_meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        list_meta["continue"] = c.into();
    }
    if let Some(r) = remaining {
        list_meta["remainingItemCount"] = r.into();
    }
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
            meta.kind,
            meta.group_version(),
            list_meta
        )
        .as_bytes(),
    );
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        o.write_json(&mut out);
    }
    out.extend_from_slice(b"]}");
    json_response(200, out)
}

/// Writes a kubeconfig for the served address, with a context named
/// `dovetail`.
pub fn kubeconfig(address: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: dovetail
  cluster:
    server: http://{address}
contexts:
- name: dovetail
  context:
    cluster: dovetail
    user: dovetail
    namespace: default
current-context: dovetail
users:
- name: dovetail
  user: {{}}
"
    )
}

#[cfg(test)]
mod tests;
