//! Git-driven sync: applies each new commit of the configured ref to the
//! cluster, used by `dovetail sync`, the controller and the `commit` step of
//! `dovetail simulate`.
//!
//! Kubernetes has no multi-object transaction, so a pass is honest about
//! what it does ([`SyncEngine::sync`]):
//! 1. **Validate everything.** The commit is loaded and validated as
//!    `dovetail validate` does, and the transition rules are checked from
//!    the live objects. If anything is invalid nothing is applied, the last
//!    applied revision stays, and the diagnostics are reported (status
//!    ConfigMap, a Warning Event, a log line, `dovetail_config_sync_errors_total`).
//!    The revision is not tried again until the ref moves.
//! 2. **Dry-run every object** it will write (server-side `dryRun=All`; the
//!    in-memory server runs its admission checks). A refusal makes the
//!    revision invalid, as in step 1.
//! 3. **Apply in dependency order**, by server-side apply under the field
//!    manager `dovetail`: EC2NodeClasses, NodePools, NodeOverlays, then
//!    CapacityBuffers (named `namespace/name`, the one namespaced kind).
//!    Objects carry `app.kubernetes.io/managed-by=dovetail`,
//!    `dovetail.dev/revision` and `dovetail.dev/source`.
//! 4. **Partial failures** are reported as "partially applied at revision
//!    X" and retried with exponential backoff (on the injected clock) until
//!    the revision converges. Nothing is rolled back by deleting.
//! 5. **Prune** (only with `prune`): managed objects no longer in the
//!    repository are deleted, NodePools before EC2NodeClasses, never one
//!    annotated `dovetail.dev/prune: disabled`, and never more than the
//!    prune limit per revision unless `force_prune`.
//!
//! The inventory of what dovetail manages is the managed-by label on the
//! live objects (listed from the cluster cache) and is recorded in the
//! status ConfigMap ([`status`]). [`watch`] wakes the engine on repository
//! changes, including git-sync's symlink swap.
//!
//! A pass that finds the revision already applied, still invalid, or waiting
//! for its retry writes no status.

mod engine;
pub mod metrics;
pub mod plan;
pub mod status;
pub mod watch;

use std::path::PathBuf;
use std::time::Duration;

pub use engine::{Outcome, SyncEngine, SyncError, resolve_head, revision_string};
pub use metrics::Metrics;
pub use status::SyncStatus;

use crate::config::yaml::Limits;

/// The field manager of dovetail's server-side applies.
pub const FIELD_MANAGER: &str = "dovetail";
/// The label every applied object carries; its value is [`MANAGED_BY_VALUE`].
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "dovetail";
/// `<branch>@sha1:<sha>` (`sha1:<sha>` for a detached HEAD) of the revision
/// that last changed the object.
pub const REVISION_ANNOTATION: &str = "dovetail.dev/revision";
/// The repository-relative file the object comes from.
pub const SOURCE_ANNOTATION: &str = "dovetail.dev/source";
/// With the value [`PRUNE_DISABLED`], the object is never pruned.
pub const PRUNE_ANNOTATION: &str = "dovetail.dev/prune";
pub const PRUNE_DISABLED: &str = "disabled";
/// The default name of the status ConfigMap.
pub const STATUS_CONFIGMAP: &str = "dovetail-sync-status";
/// The default namespace of the status ConfigMap and Events outside a
/// cluster (the CLI uses the kube client's namespace).
pub const DEFAULT_NAMESPACE: &str = "dovetail";

/// First retry after a failed apply; doubles per failure.
pub const RETRY_INITIAL: Duration = Duration::from_secs(5);
/// Longest wait between retries of a failed apply.
pub const RETRY_MAX: Duration = Duration::from_secs(5 * 60);

/// What a [`SyncEngine`] syncs and how.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The configuration repository (a git repository, a directory inside
    /// one, or a git-sync link to a worktree).
    pub path: PathBuf,
    /// The ref whose commits are applied (`HEAD` by default).
    pub git_ref: String,
    /// Delete managed objects that are no longer in the repository.
    pub prune: bool,
    /// The most objects pruned per revision; default: the larger of 1 and
    /// 10% of the managed objects, rounded up.
    pub max_prune: Option<usize>,
    /// Prune even beyond the limit.
    pub force_prune: bool,
    /// Namespace of the status ConfigMap and of Events.
    pub namespace: String,
    /// Name of the status ConfigMap.
    pub status_name: String,
    /// Accept nodeClassRefs to EC2NodeClasses that are not in the repository.
    pub allow_external_nodeclass: bool,
    /// The controller runs with the `StaticCapacity` feature gate (else
    /// static NodePools are warned about as inactive).
    pub static_capacity: bool,
    /// Likewise `NodeOverlay` and `CapacityBuffer`: their objects are
    /// applied either way, and warned about while the gate is off.
    pub node_overlay: bool,
    pub capacity_buffer: bool,
    pub limits: Limits,
    pub retry_initial: Duration,
    pub retry_max: Duration,
}

impl Settings {
    /// The defaults for the repository at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Settings {
            path: path.into(),
            git_ref: "HEAD".to_string(),
            prune: false,
            max_prune: None,
            force_prune: false,
            namespace: DEFAULT_NAMESPACE.to_string(),
            status_name: STATUS_CONFIGMAP.to_string(),
            allow_external_nodeclass: false,
            static_capacity: false,
            node_overlay: false,
            capacity_buffer: false,
            limits: Limits::default(),
            retry_initial: RETRY_INITIAL,
            retry_max: RETRY_MAX,
        }
    }
}
