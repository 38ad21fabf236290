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
//! what decoding drops); routing, the verbs (CRUD, list pages from snapshots
//! kept per `continue` token, patches, scale, eviction) and the namespace
//! controller (here); `serve::discovery` (discovery and the OpenAPI v3
//! index); `serve::requests` (bodies, `DeleteOptions`, `fieldValidation`);
//! `serve::responses` (bodies, `Status`, negotiation); `serve::watch`
//! (events from the store's watch log); `serve::table`; `serve::patch`;
//! `serve::query` (field selectors as `fields.ParseSelector` reads them,
//! label selectors through `cluster::Selector::parse`); `serve::protobuf`;
//! `serve::token`; and `serve::kubeconfig`. No authentication: it listens on
//! loopback only.
//! `tests/serve.rs` runs the production `dovetail controller` against it.

mod discovery;
pub mod kinds;
mod kubeconfig;
pub mod patch;
pub mod protobuf;
pub mod query;
mod requests;
mod responses;
pub mod table;
mod token;
mod watch;

pub use kubeconfig::kubeconfig;
use requests::*;
pub use responses::error_response;
use responses::*;

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
    /// `ApiServer::audit`).
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

/// `plural` or `plural/subresource`, as RBAC and the audit log name it.
fn resource_path(kind: &dyn ServedKind, target: &Target) -> String {
    match &target.sub {
        Some(s) => format!("{}/{s}", kind.meta().plural),
        None => kind.meta().plural.clone(),
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

fn is_builtin(group: &str) -> bool {
    !group.contains('.') || group.ends_with(".k8s.io")
}

#[cfg(test)]
mod tests;
