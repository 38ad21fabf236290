//! [`SyncEngine`]: one pass per call of [`SyncEngine::sync`], generic over
//! the [`Cluster`] and driven by an injected [`Clock`].

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::plan::{self, DesiredObject, LiveObject, Plan, WriteKind};
use super::status::{self, SyncStatus, reasons};
use super::{FIELD_MANAGER, Metrics, Settings};
use crate::api::{ApiKind, CapacityBuffer, EC2NodeClass, NodeOverlay, NodePool};
use crate::clock::{Clock, Timestamp};
use crate::cluster::{ApiError, ApplyParams, Cluster, Object, ObjectKey};
use crate::config::load::{self, Loaded};
use crate::config::source::{self, CommitInfo, Revision, SourceError};
use crate::config::validate::{self, Options};
use crate::diag::{Diagnostic, Severity};

/// Diagnostic codes produced here.
pub mod codes {
    /// A transition rule (`oldSelf`) is broken from the live object.
    pub const TRANSITION: &str = "transition";
    /// The API server's dry run rejected an object.
    pub const DRY_RUN: &str = "dry-run";
    /// An object of a kind sync does not apply.
    pub const NOT_SYNCED: &str = "not-synced";
}

/// Why the repository cannot be read: the pass applies nothing.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("`{}` is not in a git repository", .path.display())]
    NotARepository { path: std::path::PathBuf },
    #[error(transparent)]
    Source(#[from] SourceError),
}

impl SyncError {
    /// A likely fix, printed as `hint:` after the error.
    pub fn hint(&self) -> Option<String> {
        match self {
            SyncError::NotARepository { .. } => Some(
                "sync applies commits: pass a git repository, a directory inside one, or git-sync's --link"
                    .to_string(),
            ),
            SyncError::Source(e) => e.hint(),
        }
    }

    /// A bounded label for metrics and tests.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SyncError::NotARepository { .. } => "not_a_repository",
            SyncError::Source(e) => e.metric_label(),
        }
    }
}

/// What one pass did.
#[derive(Debug)]
pub enum Outcome {
    /// The revision was applied before and the cluster still matches it.
    UpToDate { revision: String },
    /// The revision is applied completely: what was written and deleted
    /// (`Kind/name`). Empty lists for a new revision that changes nothing.
    Applied {
        revision: String,
        created: Vec<String>,
        updated: Vec<String>,
        pruned: Vec<String>,
    },
    /// The revision does not validate (or the API server's dry run rejects
    /// it); nothing was applied.
    Invalid {
        revision: String,
        diagnostics: Vec<Diagnostic>,
    },
    /// The head is the invalid revision already reported.
    StillInvalid { revision: String },
    /// The revision's objects are applied, but pruning would delete more
    /// than the limit, so nothing was pruned.
    PruneBlocked {
        revision: String,
        created: Vec<String>,
        updated: Vec<String>,
        candidates: Vec<String>,
        limit: usize,
    },
    /// Some writes succeeded, then one failed; retried at `retry_at`.
    Partial {
        revision: String,
        done: Vec<String>,
        failed: String,
        error: ApiError,
        retry_at: Timestamp,
    },
    /// The cluster failed before anything was written (a dry run that did
    /// not answer); retried at `retry_at`.
    ClusterError {
        revision: String,
        error: ApiError,
        retry_at: Timestamp,
    },
    /// The repository or the ref cannot be read.
    Source { error: SyncError },
    /// A retry is pending and the head has not moved.
    Waiting { until: Timestamp },
}

impl Outcome {
    /// The exit code of `dovetail sync --once`: 0 applied or up to date, 1
    /// an invalid revision or a blocked prune, 2 the repository or the
    /// cluster failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::UpToDate { .. } | Outcome::Applied { .. } => 0,
            Outcome::Invalid { .. }
            | Outcome::StillInvalid { .. }
            | Outcome::PruneBlocked { .. } => 1,
            Outcome::Partial { .. }
            | Outcome::ClusterError { .. }
            | Outcome::Source { .. }
            | Outcome::Waiting { .. } => 2,
        }
    }
}

/// The objects of a revision that validated.
#[derive(Debug, Clone)]
struct Desired {
    sha: String,
    revision: String,
    objects: Vec<DesiredObject>,
    /// For the positions of transition-rule violations.
    loaded: Arc<Loaded>,
}

/// The sync engine. See the [module documentation](super).
pub struct SyncEngine<C: Cluster> {
    cluster: Arc<C>,
    clock: Arc<dyn Clock>,
    settings: Settings,
    metrics: Metrics,
    /// The last revision that validated and passed its dry run.
    desired: Option<Desired>,
    /// The sha of the last invalid head, not retried until the head moves.
    rejected: Option<String>,
    /// The sha of the last attempt, and when to retry it after a failure.
    attempted: Option<String>,
    retry_at: Option<Timestamp>,
    failures: u32,
    status: SyncStatus,
    /// The status last written, to skip writes that change nothing.
    written: Option<SyncStatus>,
    /// The reason and revision of the last Event, to emit one per change.
    last_event: Option<(String, String)>,
}

impl<C: Cluster> std::fmt::Debug for SyncEngine<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncEngine")
            .field("settings", &self.settings)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

/// The commit the configured ref points to now.
pub fn resolve_head(settings: &Settings) -> Result<CommitInfo, SyncError> {
    let rev = Revision::Ref(settings.git_ref.clone());
    match source::resolve_commit(&settings.path, &rev) {
        Ok(commit) => Ok(commit),
        Err(SourceError::RefWithoutRepository { path, .. }) => {
            Err(SyncError::NotARepository { path })
        }
        Err(e) => Err(e.into()),
    }
}

/// `<branch>@sha1:<sha>`, or `sha1:<sha>` for a detached HEAD.
pub fn revision_string(commit: &CommitInfo) -> String {
    match &commit.branch {
        Some(branch) => format!("{branch}@sha1:{}", commit.sha),
        None => format!("sha1:{}", commit.sha),
    }
}

impl<C: Cluster> SyncEngine<C> {
    /// An engine that has applied nothing yet. The status starts from the
    /// status ConfigMap when the cluster's cache has it.
    pub fn new(cluster: Arc<C>, clock: Arc<dyn Clock>, settings: Settings) -> Self {
        let key = ObjectKey::new(settings.namespace.clone(), settings.status_name.clone());
        let status = cluster
            .get::<ConfigMap>(&key)
            .and_then(|cm| cm.data.as_ref().map(SyncStatus::from_data))
            .unwrap_or_default();
        SyncEngine {
            cluster,
            clock,
            settings,
            metrics: Metrics::new(),
            desired: None,
            rejected: None,
            attempted: None,
            retry_at: None,
            failures: 0,
            written: Some(status.clone()).filter(|s| *s != SyncStatus::default()),
            status,
            last_event: None,
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The settings, to change between passes (e.g. pruning per commit in
    /// a simulation).
    pub fn settings_mut(&mut self) -> &mut Settings {
        &mut self.settings
    }

    /// Makes a pending retry due now.
    pub fn retry_now(&mut self) {
        if self.retry_at.is_some() {
            self.retry_at = Some(self.clock.now());
        }
    }

    /// The clock the engine reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The status as last recorded.
    pub fn status(&self) -> &SyncStatus {
        &self.status
    }

    /// When a failed apply is retried, if one failed.
    pub fn next_retry(&self) -> Option<Timestamp> {
        self.retry_at
    }

    /// Resolves the configured ref: whether the repository can be synced
    /// at all.
    pub fn head(&self) -> Result<CommitInfo, SyncError> {
        resolve_head(&self.settings)
    }

    /// One pass: reads the head of the ref and, when it is new (or the
    /// cluster has drifted from it, or a retry is due), validates, dry-runs,
    /// applies and prunes; then records the status, an Event, metrics and
    /// a log line.
    #[tracing::instrument(skip(self), fields(path = %self.settings.path.display(), git_ref = %self.settings.git_ref))]
    pub async fn sync(&mut self) -> Outcome {
        let now = self.clock.now();
        let started = Instant::now();
        let outcome = self.pass(now).await;
        if !matches!(
            outcome,
            Outcome::Waiting { .. } | Outcome::StillInvalid { .. } | Outcome::UpToDate { .. }
        ) {
            self.metrics.observe_pass(started.elapsed());
        }
        self.record(&outcome, now).await;
        outcome
    }

    async fn pass(&mut self, now: Timestamp) -> Outcome {
        let head = match self.head() {
            Ok(head) => head,
            Err(error) => return Outcome::Source { error },
        };
        let revision = revision_string(&head);
        if self.rejected.as_deref() == Some(head.sha.as_str()) {
            return Outcome::StillInvalid { revision };
        }
        if let Some(until) = self.retry_at
            && until > now
            && self.attempted.as_deref() == Some(head.sha.as_str())
        {
            return Outcome::Waiting { until };
        }
        let new_head = self.attempted.as_deref() != Some(head.sha.as_str());
        self.attempted = Some(head.sha.clone());
        if new_head {
            self.failures = 0;
            self.retry_at = None;
        }

        let candidate = match &self.desired {
            Some(d) if d.sha == head.sha => d.clone(),
            _ => match self.load(&head, &revision) {
                Ok(d) => d,
                Err(outcome) => {
                    if matches!(*outcome, Outcome::Invalid { .. }) {
                        self.rejected = Some(head.sha.clone());
                    }
                    return *outcome;
                }
            },
        };

        let live = self.live();
        let plan = plan::plan(&candidate.objects, &live);
        if !plan.transitions.is_empty() {
            self.rejected = Some(head.sha.clone());
            return Outcome::Invalid {
                revision,
                diagnostics: transition_diagnostics(&plan, &candidate.loaded),
            };
        }

        // Dry-run every write before the first real one.
        let dry = ApplyParams::new(FIELD_MANAGER).dry_run();
        let mut rejected = Vec::new();
        for w in &plan.writes {
            match self.apply_object(&w.object, &dry).await {
                Ok(()) => {}
                Err(e @ (ApiError::Invalid { .. } | ApiError::BadRequest { .. })) => {
                    rejected.push(dry_run_diagnostic(&w.object, &e, &candidate.loaded));
                }
                Err(error) => {
                    let retry_at = self.schedule_retry(now);
                    return Outcome::ClusterError {
                        revision,
                        error,
                        retry_at,
                    };
                }
            }
        }
        if !rejected.is_empty() {
            self.rejected = Some(head.sha.clone());
            return Outcome::Invalid {
                revision,
                diagnostics: rejected,
            };
        }
        self.desired = Some(candidate);

        let params = ApplyParams::new(FIELD_MANAGER);
        let (mut created, mut updated) = (Vec::new(), Vec::new());
        for w in &plan.writes {
            if let Err(error) = self.apply_object(&w.object, &params).await {
                let mut done = created;
                done.append(&mut updated);
                let retry_at = self.schedule_retry(now);
                return Outcome::Partial {
                    revision,
                    done,
                    failed: w.object.display(),
                    error,
                    retry_at,
                };
            }
            match w.kind {
                WriteKind::Create => created.push(w.object.display()),
                WriteKind::Update => updated.push(w.object.display()),
            }
        }

        let mut pruned = Vec::new();
        if self.settings.prune && !plan.prune_candidates.is_empty() {
            let limit = plan::prune_limit(self.settings.max_prune, plan.managed);
            if plan.prune_candidates.len() > limit && !self.settings.force_prune {
                self.failures = 0;
                self.retry_at = None;
                return Outcome::PruneBlocked {
                    revision,
                    created,
                    updated,
                    candidates: plan
                        .prune_candidates
                        .iter()
                        .map(|(k, n)| format!("{}/{n}", k.kind()))
                        .collect(),
                    limit,
                };
            }
            for (kind, name) in &plan.prune_candidates {
                let display = format!("{}/{name}", kind.kind());
                if let Err(error) = self.delete_object(*kind, name).await {
                    let mut done = created;
                    done.append(&mut updated);
                    done.extend(pruned.iter().map(|p| format!("deleted {p}")));
                    let retry_at = self.schedule_retry(now);
                    return Outcome::Partial {
                        revision,
                        done,
                        failed: format!("deleting {display}"),
                        error,
                        retry_at,
                    };
                }
                pruned.push(display);
            }
        }
        self.failures = 0;
        self.retry_at = None;
        let changed = !(created.is_empty() && updated.is_empty() && pruned.is_empty());
        if !changed
            && self.status.ready
            && self.status.last_applied_revision.as_deref() == Some(revision.as_str())
        {
            return Outcome::UpToDate { revision };
        }
        Outcome::Applied {
            revision,
            created,
            updated,
            pruned,
        }
    }

    /// Loads and validates the commit `head`.
    fn load(&self, head: &CommitInfo, revision: &str) -> Result<Desired, Box<Outcome>> {
        let loaded = load::load(
            &self.settings.path,
            &Revision::Ref(head.sha.clone()),
            true,
            &self.settings.limits,
        )
        .map_err(|e| Box::new(Outcome::Source { error: e.into() }))?;
        let opts = Options {
            allow_external_nodeclass: self.settings.allow_external_nodeclass,
            static_capacity: Some(self.settings.static_capacity),
            node_overlay: Some(self.settings.node_overlay),
            capacity_buffer: Some(self.settings.capacity_buffer),
            ..Options::default()
        };
        let report = validate::validate(&loaded, &opts);
        let mut errors: Vec<Diagnostic> = report
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .cloned()
            .collect();
        for o in report.objects_of(ApiKind::NodeClaim) {
            errors.push(
                Diagnostic::error(
                    codes::NOT_SYNCED,
                    "NodeClaims are created by the controller; sync does not apply them",
                )
                .in_file(o.file.clone())
                .at(o.pos)
                .with_object(o.display())
                .with_hint("remove the NodeClaim from the repository"),
            );
        }
        for w in report
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning)
        {
            tracing::warn!(revision, diagnostic = %w, "configuration warning");
        }
        if !errors.is_empty() {
            return Err(Box::new(Outcome::Invalid {
                revision: revision.to_string(),
                diagnostics: errors,
            }));
        }
        let objects = report
            .objects
            .iter()
            .filter(|o| ApiKind::SYNCED.contains(&o.kind))
            .map(|o| DesiredObject::new(o.kind, &o.key(), &o.file, &o.value, revision))
            .collect();
        Ok(Desired {
            sha: head.sha.clone(),
            revision: revision.to_string(),
            objects,
            loaded: Arc::new(loaded),
        })
    }

    /// The live NodePools and EC2NodeClasses, from the cluster's cache.
    fn live(&self) -> Vec<LiveObject> {
        fn of<K: Object>(cluster: &impl Cluster, kind: ApiKind, out: &mut Vec<LiveObject>) {
            for o in cluster.list::<K>() {
                if let Ok(mut value) = serde_json::to_value(o.as_ref()) {
                    // A typed object serialises without its type meta.
                    if let Some(object) = value.as_object_mut() {
                        object.insert("apiVersion".into(), kind.api_version().into());
                        object.insert("kind".into(), kind.kind().into());
                    }
                    out.push(LiveObject {
                        kind,
                        name: kind.object_name(&value),
                        value,
                    });
                }
            }
        }
        let mut out = Vec::new();
        of::<EC2NodeClass>(self.cluster.as_ref(), ApiKind::EC2NodeClass, &mut out);
        of::<NodePool>(self.cluster.as_ref(), ApiKind::NodePool, &mut out);
        of::<NodeOverlay>(self.cluster.as_ref(), ApiKind::NodeOverlay, &mut out);
        of::<CapacityBuffer>(self.cluster.as_ref(), ApiKind::CapacityBuffer, &mut out);
        out
    }

    async fn apply_object(&self, o: &DesiredObject, params: &ApplyParams) -> Result<(), ApiError> {
        fn typed<K: DeserializeOwned>(o: &DesiredObject) -> Result<K, ApiError> {
            serde_json::from_value(o.value.clone()).map_err(|e| ApiError::BadRequest {
                message: format!("{}: {e}", o.display()),
            })
        }
        match o.kind {
            ApiKind::NodePool => self
                .cluster
                .apply(typed::<NodePool>(o)?, params)
                .await
                .map(drop),
            ApiKind::EC2NodeClass => self
                .cluster
                .apply(typed::<EC2NodeClass>(o)?, params)
                .await
                .map(drop),
            ApiKind::NodeOverlay => self
                .cluster
                .apply(typed::<NodeOverlay>(o)?, params)
                .await
                .map(drop),
            ApiKind::CapacityBuffer => self
                .cluster
                .apply(typed::<CapacityBuffer>(o)?, params)
                .await
                .map(drop),
            ApiKind::NodeClaim => Err(ApiError::BadRequest {
                message: format!("{}: NodeClaims are not synced", o.display()),
            }),
        }
    }

    /// Deletes an object; one already gone counts as deleted.
    async fn delete_object(&self, kind: ApiKind, name: &str) -> Result<(), ApiError> {
        let key = match name.split_once('/') {
            Some((namespace, name)) if kind.namespaced() => ObjectKey::new(namespace, name),
            _ => ObjectKey::cluster(name),
        };
        let result = match kind {
            ApiKind::NodePool => self.cluster.delete::<NodePool>(&key).await.map(drop),
            ApiKind::EC2NodeClass => self.cluster.delete::<EC2NodeClass>(&key).await.map(drop),
            ApiKind::NodeOverlay => self.cluster.delete::<NodeOverlay>(&key).await.map(drop),
            ApiKind::CapacityBuffer => self.cluster.delete::<CapacityBuffer>(&key).await.map(drop),
            ApiKind::NodeClaim => Ok(()),
        };
        match result {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    /// Counts a failure and returns when to retry: the initial delay,
    /// doubled per consecutive failure, at most the maximum.
    fn schedule_retry(&mut self, now: Timestamp) -> Timestamp {
        self.failures = self.failures.saturating_add(1);
        let factor = 2u32.saturating_pow(self.failures.saturating_sub(1).min(16));
        let delay = self
            .settings
            .retry_initial
            .saturating_mul(factor)
            .min(self.settings.retry_max);
        let at = now.checked_add(delay).unwrap_or(now);
        self.retry_at = Some(at);
        at
    }

    /// `Kind/name` of every managed live object.
    fn inventory(&self) -> Vec<String> {
        self.live()
            .into_iter()
            .filter(|o| plan::is_managed(&o.value))
            .map(|o| format!("{}/{}", o.kind.kind(), o.name))
            .collect()
    }

    /// Updates the status, metrics, Events and logs after a pass.
    async fn record(&mut self, outcome: &Outcome, now: Timestamp) {
        let last_applied = self
            .status
            .last_applied_revision
            .clone()
            .unwrap_or_else(|| "none".to_string());
        let mut next = self.status.clone();
        let (warning, revision) = match outcome {
            Outcome::UpToDate { .. } | Outcome::StillInvalid { .. } | Outcome::Waiting { .. } => {
                return;
            }
            Outcome::Applied {
                revision,
                created,
                updated,
                pruned,
            } => {
                let message = format!(
                    "applied revision {revision}: {} created, {} updated, {} pruned",
                    created.len(),
                    updated.len(),
                    pruned.len()
                );
                tracing::info!(revision, ?created, ?updated, ?pruned, "revision applied");
                self.metrics.applied(revision, &self.counts());
                next.last_applied_revision = Some(revision.clone());
                set(
                    &mut next,
                    revision,
                    true,
                    reasons::APPLIED,
                    message,
                    String::new(),
                );
                (false, revision.clone())
            }
            Outcome::Invalid {
                revision,
                diagnostics,
            } => {
                let text: Vec<String> = diagnostics.iter().map(diagnostic_line).collect();
                let message = format!(
                    "revision {revision} is invalid ({} error{}); nothing applied; {last_applied} stays applied",
                    diagnostics.len(),
                    if diagnostics.len() == 1 { "" } else { "s" }
                );
                tracing::error!(revision, diagnostics = %text.join("\n"), "{message}");
                self.metrics.error("invalid");
                let first = text.first().cloned().unwrap_or_default();
                set(
                    &mut next,
                    revision,
                    false,
                    reasons::INVALID,
                    format!("{message}: {first}"),
                    text.join("\n"),
                );
                (true, revision.clone())
            }
            Outcome::PruneBlocked {
                revision,
                candidates,
                limit,
                ..
            } => {
                let message = format!(
                    "revision {revision} is applied, but it would prune {} objects and the limit is {limit}; nothing pruned",
                    candidates.len()
                );
                let error = format!(
                    "{message}\nwould prune: {}\nhint: raise --max-prune, or pass --force-prune once",
                    candidates.join(", ")
                );
                tracing::error!(revision, ?candidates, limit, "prune blocked");
                self.metrics.error("prune_blocked");
                self.metrics.applied(revision, &self.counts());
                next.last_applied_revision = Some(revision.clone());
                set(
                    &mut next,
                    revision,
                    false,
                    reasons::PRUNE_BLOCKED,
                    message,
                    error,
                );
                (true, revision.clone())
            }
            Outcome::Partial {
                revision,
                done,
                failed,
                error,
                retry_at,
            } => {
                let message = format!(
                    "partially applied at revision {revision}: {} of the writes done, {failed} failed: {error}; retrying at {}",
                    done.len(),
                    crate::clock::format_rfc3339(*retry_at)
                );
                tracing::error!(revision, ?done, failed, %error, "partially applied");
                self.metrics.error("apply");
                let detail = format!("{message}\ndone: {}", done.join(", "));
                set(
                    &mut next,
                    revision,
                    false,
                    reasons::PARTIAL,
                    message,
                    detail,
                );
                (true, revision.clone())
            }
            Outcome::ClusterError {
                revision,
                error,
                retry_at,
            } => {
                let message = format!(
                    "revision {revision} not applied: the dry run failed: {error}; retrying at {}",
                    crate::clock::format_rfc3339(*retry_at)
                );
                tracing::error!(revision, %error, "dry run failed");
                self.metrics.error("apply");
                set(
                    &mut next,
                    revision,
                    false,
                    reasons::CLUSTER,
                    message.clone(),
                    message,
                );
                (true, revision.clone())
            }
            Outcome::Source { error } => {
                let mut text = error.to_string();
                let mut source = std::error::Error::source(error);
                while let Some(s) = source {
                    text.push_str(&format!(": {s}"));
                    source = s.source();
                }
                if let Some(hint) = error.hint() {
                    text.push_str(&format!("\nhint: {hint}"));
                }
                tracing::error!(error = %text, "cannot read the repository");
                self.metrics.error("source");
                let revision = next.last_attempted_revision.clone().unwrap_or_default();
                set(
                    &mut next,
                    &revision,
                    false,
                    reasons::SOURCE,
                    format!("cannot read the repository: {error}"),
                    text,
                );
                (true, revision)
            }
        };
        next.inventory = self.inventory();
        if next != self.status {
            next.last_transition_time = Some(now);
        }
        self.status = next;
        let compare = |s: &SyncStatus| SyncStatus {
            last_transition_time: None,
            ..s.clone()
        };
        if self.written.as_ref().map(compare) != Some(compare(&self.status)) {
            let cm = self
                .status
                .to_configmap(&self.settings.namespace, &self.settings.status_name);
            match self
                .cluster
                .apply(cm, &ApplyParams::new(FIELD_MANAGER))
                .await
            {
                Ok(_) => self.written = Some(self.status.clone()),
                Err(error) => tracing::warn!(%error, "cannot write the sync status ConfigMap"),
            }
        }
        let key = (self.status.reason.clone(), revision);
        if self.last_event.as_ref() != Some(&key) {
            let event = status::event(
                &self.settings.namespace,
                &self.settings.status_name,
                warning,
                &self.status.reason,
                &self.status.message,
                now,
            );
            match self.cluster.create(event).await {
                Ok(_) => self.last_event = Some(key),
                Err(error) => tracing::warn!(%error, "cannot record the sync Event"),
            }
        }
    }

    /// Objects of the last validated revision, by kind.
    fn counts(&self) -> Vec<(ApiKind, usize)> {
        let objects = self
            .desired
            .as_ref()
            .map(|d| d.objects.as_slice())
            .unwrap_or_default();
        ApiKind::SYNCED
            .into_iter()
            .map(|k| (k, objects.iter().filter(|o| o.kind == k).count()))
            .collect()
    }

    /// The revision of the last validated commit, if any.
    pub fn desired_revision(&self) -> Option<&str> {
        self.desired.as_ref().map(|d| d.revision.as_str())
    }
}

fn set(
    status: &mut SyncStatus,
    revision: &str,
    ready: bool,
    reason: &str,
    message: String,
    error: String,
) {
    if !revision.is_empty() {
        status.last_attempted_revision = Some(revision.to_string());
    }
    status.ready = ready;
    status.reason = reason.to_string();
    status.message = message;
    status.last_error = error;
}

/// A diagnostic on one line, with its hint.
fn diagnostic_line(d: &Diagnostic) -> String {
    match &d.hint {
        Some(h) => format!("{d} (hint: {h})"),
        None => d.to_string(),
    }
}

/// Where an object of a loaded revision starts and where `path` is in it.
fn locate(loaded: &Loaded, o: &DesiredObject, path: &crate::diag::JsonPath) -> crate::diag::Pos {
    loaded
        .files
        .iter()
        .filter(|f| f.path == o.file)
        .flat_map(|f| f.docs.iter())
        .find(|d| {
            d.root.get("kind").and_then(|k| k.as_str()) == Some(o.kind.kind())
                && d.root
                    .get("metadata")
                    .and_then(|m| m.get("name"))
                    .and_then(|n| n.as_str())
                    == Some(o.name.as_str())
        })
        .map(|d| d.root.locate(path))
        .unwrap_or_default()
}

fn transition_diagnostics(plan: &Plan, loaded: &Loaded) -> Vec<Diagnostic> {
    plan.transitions
        .iter()
        .map(|t| {
            let object = DesiredObject {
                kind: t.kind,
                name: t.name.clone(),
                file: t.file.clone(),
                value: Value::Null,
            };
            let mut d = Diagnostic::error(
                codes::TRANSITION,
                format!("{} (from the live object)", t.message),
            )
            .in_file(t.file.clone())
            .at(locate(loaded, &object, &t.path))
            .with_object(object.display())
            .with_path(t.path.clone());
            if let Some(h) = t.hint {
                d = d.with_hint(h);
            }
            d
        })
        .collect()
}

fn dry_run_diagnostic(o: &DesiredObject, e: &ApiError, loaded: &Loaded) -> Diagnostic {
    Diagnostic::error(
        codes::DRY_RUN,
        format!("the API server's dry run rejected it: {e}"),
    )
    .in_file(o.file.clone())
    .at(locate(loaded, o, &crate::diag::JsonPath::root()))
    .with_object(o.display())
}
