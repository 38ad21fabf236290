//! Watch streams: newline-delimited JSON events over a chunked response,
//! as the API server sends them
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::kinds::{Change, ServedKind, Stored};
use super::query::{FieldSelector, Query};
use super::{ApiServer, Body};
use crate::cluster::{ApiError, EventType, ObjectKey, Selector};
use crate::world::faults::Effect;

/// How long a watch runs when the client gives no `timeoutSeconds`: the
/// API server's default `--min-request-timeout` (30 minutes).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// What a watch selects.
struct Filter {
    namespace: Option<String>,
    labels: Selector,
    fields: FieldSelector,
}

impl Filter {
    fn selects(&self, o: &Stored) -> bool {
        let meta = o.meta();
        if let Some(ns) = &self.namespace
            && meta.namespace.as_deref() != Some(ns.as_str())
        {
            return false;
        }
        if !self.labels.matches_opt(meta.labels.as_ref()) {
            return false;
        }
        self.fields.matches_object(o.as_ref())
    }

    /// Whether an object can leave the selection by changing.
    fn can_change(&self) -> bool {
        !self.labels.is_everything() || !self.fields.is_empty()
    }
}

fn key_of(o: &Stored) -> ObjectKey {
    let m = o.meta();
    ObjectKey::new(
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

fn event_type(t: EventType) -> &'static str {
    match t {
        EventType::Added => "ADDED",
        EventType::Modified => "MODIFIED",
        EventType::Deleted => "DELETED",
    }
}

/// Starts a watch: checks its parameters, then streams from a task.
pub(super) fn start(
    server: Arc<ApiServer>,
    kind: &dyn ServedKind,
    namespace: Option<String>,
    query: &Query,
    table: bool,
    protobuf: bool,
    effect: Effect,
) -> Result<Response<Body>, ApiError> {
    let meta = kind.meta().clone();
    let labels = query.labels()?;
    let fields = query.fields()?;
    fields.check(&meta.kind)?;
    let bookmarks = query.flag("allowWatchBookmarks")?;
    let send_initial = query.flag("sendInitialEvents")?;
    let rv_param = query.get("resourceVersion").unwrap_or_default().to_string();
    if send_initial && query.get("resourceVersionMatch") != Some("NotOlderThan") {
        return Err(ApiError::Invalid {
            resource: "ListOptions.meta.k8s.io".into(),
            key: ObjectKey::default(),
            messages: vec!["resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".into()],
        });
    }
    let start_rv = match rv_param.as_str() {
        "" | "0" => None,
        v => Some(v.parse::<u64>().map_err(|_| ApiError::BadRequest {
            message: format!("invalid resource version: {v:?}"),
        })?),
    };
    let timeout = query
        .int("timeoutSeconds")?
        .filter(|t| *t > 0)
        .map_or(DEFAULT_TIMEOUT, |t| Duration::from_secs(t as u64));
    let timeout = effect.drop_watch_after.map_or(timeout, |d| d.min(timeout));
    let filter = Filter {
        namespace,
        labels,
        fields,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let include = query.get("includeObject").unwrap_or("Metadata").to_string();
    let (group, version, plural) = (
        meta.group.clone(),
        meta.version.clone(),
        meta.plural.clone(),
    );
    tokio::spawn(async move {
        let Some(kind) = server.kinds.find(&group, &version, &plural) else {
            return;
        };
        let stream = Stream {
            server: &server,
            kind,
            filter,
            tx,
            table,
            protobuf,
            include,
            first_row: true,
        };
        let _ = tokio::time::timeout(timeout, stream.run(start_rv, send_initial, bookmarks)).await;
    });
    let body = StreamBody::new(
        tokio_stream_from(rx).map(|b| Ok::<_, std::convert::Infallible>(Frame::data(b))),
    );
    let mut r = Response::new(BodyExt::boxed(body));
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(if protobuf {
            super::protobuf::WATCH_MEDIA_TYPE
        } else {
            "application/json"
        }),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache, private"),
    );
    Ok(r)
}

fn tokio_stream_from(rx: mpsc::Receiver<Bytes>) -> impl futures::Stream<Item = Bytes> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
}

struct Stream<'a> {
    server: &'a ApiServer,
    kind: &'a dyn ServedKind,
    filter: Filter,
    tx: mpsc::Sender<Bytes>,
    table: bool,
    /// Frames of protobuf `WatchEvent`s instead of lines of JSON.
    protobuf: bool,
    include: String,
    first_row: bool,
}

impl Stream<'_> {
    async fn send(&mut self, kind: &str, object: Value) -> bool {
        let frame = if self.protobuf {
            match super::protobuf::watch_frame(kind, &object) {
                Some(Ok(frame)) => frame,
                other => {
                    let error = other
                        .and_then(Result::err)
                        .unwrap_or_else(|| "the object's kind has no protobuf message".into());
                    tracing::warn!(%error, "cannot write a watch event in protobuf");
                    return false;
                }
            }
        } else {
            let mut line =
                serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
            line.push(b'\n');
            line
        };
        self.tx.send(Bytes::from(frame)).await.is_ok()
    }

    async fn send_object(&mut self, kind: &str, o: &Stored) -> bool {
        let object = if self.table {
            let c = &self.server.cluster;
            let mut t = self.server.printers.table(
                &self.kind.meta().kind,
                &[o.to_json()],
                o.meta().resource_version.as_deref().unwrap_or_default(),
                None,
                &self.include,
                c.clock().now(),
            );
            if !self.first_row {
                t["columnDefinitions"] = json!([]);
            }
            self.first_row = false;
            t
        } else {
            o.to_json()
        };
        self.send(kind, object).await
    }

    async fn bookmark(&mut self, rv: u64, initial_end: bool) -> bool {
        let meta = self.kind.meta();
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object =
            json!({"kind": meta.kind, "apiVersion": meta.group_version(), "metadata": metadata});
        self.send("BOOKMARK", object).await
    }

    async fn run(mut self, start_rv: Option<u64>, send_initial: bool, bookmarks: bool) {
        let c = self.server.cluster.clone();
        let Ok(mut notify) = self.kind.subscribe(&c) else {
            return;
        };
        notify.borrow_and_update();
        let mut selected: HashMap<ObjectKey, Stored> = HashMap::new();
        let track = self.filter.can_change();
        let mut rv = match start_rv {
            Some(rv) if !send_initial => {
                if track {
                    selected = self
                        .state_at(&c, rv)
                        .into_iter()
                        .filter(|(_, o)| self.filter.selects(o))
                        .collect();
                }
                rv
            }
            _ => {
                let (items, list_rv) = self.kind.list(
                    &c,
                    self.filter.namespace.as_deref(),
                    &Selector::everything(),
                );
                let chosen: Vec<&Stored> =
                    items.iter().filter(|o| self.filter.selects(o)).collect();
                for o in chosen {
                    if track {
                        selected.insert(key_of(o), o.clone());
                    }
                    if !self.send_object("ADDED", o).await {
                        return;
                    }
                }
                if send_initial && bookmarks && !self.bookmark(list_rv, true).await {
                    return;
                }
                list_rv
            }
        };
        let every = self.server.options.bookmark_every;
        let mut next_bookmark = tokio::time::Instant::now() + every;
        loop {
            let global = c.resource_version();
            let changes = match self.kind.changes_after(&c, rv) {
                Ok(changes) => changes,
                Err(e @ ApiError::Gone { .. }) => {
                    let status = json!({
                        "kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "message": e.to_string(),
                        "reason": "Expired", "code": 410,
                    });
                    self.send("ERROR", status).await;
                    return;
                }
                Err(_) => return,
            };
            for ch in changes {
                rv = ch.resource_version;
                if !self.deliver(&ch, track, &mut selected).await {
                    return;
                }
            }
            rv = rv.max(global);
            if bookmarks && !self.table && tokio::time::Instant::now() >= next_bookmark {
                if !self.bookmark(rv, false).await {
                    return;
                }
                next_bookmark = tokio::time::Instant::now() + every;
            }
            tokio::select! {
                changed = notify.changed() => if changed.is_err() { return; },
                () = tokio::time::sleep_until(next_bookmark), if bookmarks => {},
                () = self.tx.closed() => return,
            }
        }
    }

    /// The objects as they were at resource version `rv`, from the
    /// current ones and the watch log: an object changed since is taken
    /// as its log had it at `rv` (absent if it was added since). One whose
    /// state at `rv` is older than the log is taken as its first change
    /// since has it.
    fn state_at(&self, c: &crate::world::MemoryCluster, rv: u64) -> HashMap<ObjectKey, Stored> {
        let (items, _) =
            self.kind
                .list(c, self.filter.namespace.as_deref(), &Selector::everything());
        let mut state: HashMap<ObjectKey, Stored> =
            items.into_iter().map(|o| (key_of(&o), o)).collect();
        let log = match self.kind.changes_after(c, 0) {
            Err(ApiError::Gone { oldest, .. }) => self.kind.changes_after(c, oldest),
            other => other,
        }
        .unwrap_or_default();
        let mut decided: HashSet<ObjectKey> = HashSet::new();
        for (i, ch) in log.iter().enumerate() {
            if ch.resource_version <= rv {
                continue;
            }
            let key = key_of(&ch.object);
            if !decided.insert(key.clone()) {
                continue;
            }
            let before = log[..i]
                .iter()
                .rev()
                .find(|e| e.resource_version <= rv && key_of(&e.object) == key);
            let then = match before {
                Some(e) if e.event_type == EventType::Deleted => None,
                Some(e) => Some(e.object.clone()),
                None if ch.event_type == EventType::Added => None,
                None => Some(ch.object.clone()),
            };
            match then {
                Some(o) => state.insert(key, o),
                None => state.remove(&key),
            };
        }
        state
    }

    /// Sends one change as the selection sees it: an object that starts
    /// matching is ADDED, one that stops is DELETED, sent as it was last
    /// selected, as the API server sends it.
    async fn deliver(
        &mut self,
        ch: &Change,
        track: bool,
        selected: &mut HashMap<ObjectKey, Stored>,
    ) -> bool {
        let matches = self.filter.selects(&ch.object);
        if !track {
            return !matches
                || self
                    .send_object(event_type(ch.event_type), &ch.object)
                    .await;
        }
        let key = key_of(&ch.object);
        let was = selected.contains_key(&key);
        match (ch.event_type, was, matches) {
            (EventType::Deleted, true, _) => {
                selected.remove(&key);
                self.send_object("DELETED", &ch.object).await
            }
            (_, true, false) => {
                let last = selected.remove(&key).unwrap_or_else(|| ch.object.clone());
                self.send_object("DELETED", &last).await
            }
            (EventType::Deleted, false, _) | (_, false, false) => true,
            (_, true, true) => {
                selected.insert(key, ch.object.clone());
                self.send_object("MODIFIED", &ch.object).await
            }
            (_, false, true) => {
                selected.insert(key, ch.object.clone());
                self.send_object("ADDED", &ch.object).await
            }
        }
    }
}
