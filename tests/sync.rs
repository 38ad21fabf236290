//! Git-driven sync against the in-memory API server, on git repositories
//! built in temporary directories: applying, refusing invalid revisions,
//! pruning and its guards, force-pushes, git-sync's symlink swap (through
//! the notify watcher), partial failures and their retry, and bad input.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use git2::{IndexAddOption, Oid, Repository, RepositoryInitOptions, Signature, Time};
use k8s_openapi::api::core::v1::{ConfigMap, Event};

use dovetail::api::{EC2NodeClass, NodePool};
use dovetail::clock::{Clock, ManualClock, Timestamp};
use dovetail::cluster::{
    ApiError, ApplyParams, Cluster, DeleteOutcome, DeleteParams, Object, ObjectKey, Selector,
};
use dovetail::sync::{Outcome, Settings, SyncEngine, SyncStatus, watch};
use dovetail::world::MemoryCluster;
use dovetail::world::apiserver::admission;

use crate::support::dovetail;

const NODECLASS: &str = "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: NAME
spec:
  amiSelectorTerms:
    - alias: al2023@latest
  role: KarpenterNodeRole-test
  subnetSelectorTerms:
    - tags: {karpenter.sh/discovery: test}
  securityGroupSelectorTerms:
    - tags: {karpenter.sh/discovery: test}
";

fn nodeclass(name: &str) -> String {
    NODECLASS.replace("NAME", name)
}

fn nodepool(name: &str, cpu: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {name}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: [on-demand]
  limits:
    cpu: \"{cpu}\"
"
    )
}

/// A git repository in a temporary directory on branch `main`, committing
/// with a fixed clock so shas are the same on every run.
struct Repo {
    dir: tempfile::TempDir,
    git: Repository,
    commits: i64,
}

impl Repo {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let git = init(dir.path());
        Repo {
            dir,
            git,
            commits: 0,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, path: &str, content: &str) -> &Self {
        let p = self.dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
        self
    }

    fn remove(&self, path: &str) -> &Self {
        std::fs::remove_file(self.dir.path().join(path)).unwrap();
        self
    }

    fn commit(&mut self, message: &str) -> String {
        self.commits += 1;
        commit_all(&self.git, message, self.commits).to_string()
    }

    /// Moves `main` to `sha` (a force-push or a reset) and checks it out.
    fn reset_hard(&self, sha: &str) {
        let commit = self.git.find_commit(Oid::from_str(sha).unwrap()).unwrap();
        self.git
            .reset(commit.as_object(), git2::ResetType::Hard, None)
            .unwrap();
    }
}

fn init(path: &Path) -> Repository {
    let mut opts = RepositoryInitOptions::new();
    opts.initial_head("main");
    Repository::init_opts(path, &opts).unwrap()
}

fn commit_all(git: &Repository, message: &str, n: i64) -> Oid {
    let mut index = git.index().unwrap();
    index.add_all(["*"], IndexAddOption::DEFAULT, None).unwrap();
    index.update_all(["*"], None).unwrap();
    index.write().unwrap();
    let tree = git.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = Signature::new("t", "t@example.com", &Time::new(1_700_000_000 + n, 0)).unwrap();
    let parent = git.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<_> = parent.iter().collect();
    git.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)
        .unwrap()
}

/// A repository with the EC2NodeClass `default` and the NodePools `a` and `b`.
fn base_repo() -> Repo {
    let mut repo = Repo::new();
    repo.write("nodeclasses/default.yaml", &nodeclass("default"))
        .write("nodepools/a.yaml", &nodepool("a", "10"))
        .write("nodepools/b.yaml", &nodepool("b", "10"));
    repo.commit("initial");
    repo
}

fn start() -> Timestamp {
    "2026-01-05T00:00:00Z".parse().unwrap()
}

fn memory_cluster(clock: &Arc<ManualClock>) -> MemoryCluster {
    let clock: Arc<dyn Clock> = clock.clone();
    let cluster = MemoryCluster::new(clock);
    admission::register(&cluster).unwrap();
    cluster
}

struct Harness<C: Cluster> {
    engine: SyncEngine<C>,
    cluster: Arc<C>,
    clock: Arc<ManualClock>,
}

fn harness(path: &Path, tweak: impl FnOnce(&mut Settings)) -> Harness<MemoryCluster> {
    let clock = Arc::new(ManualClock::new(start()));
    let cluster = Arc::new(memory_cluster(&clock));
    harness_with(cluster, clock, path, tweak)
}

fn harness_with<C: Cluster>(
    cluster: Arc<C>,
    clock: Arc<ManualClock>,
    path: &Path,
    tweak: impl FnOnce(&mut Settings),
) -> Harness<C> {
    let mut settings = Settings::new(path);
    tweak(&mut settings);
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    Harness {
        engine: SyncEngine::new(cluster.clone(), dyn_clock, settings),
        cluster,
        clock,
    }
}

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

impl<C: Cluster> Harness<C> {
    fn sync(&mut self) -> Outcome {
        block_on(self.engine.sync())
    }

    fn pool(&self, name: &str) -> Option<Arc<NodePool>> {
        self.cluster.get::<NodePool>(&ObjectKey::cluster(name))
    }

    fn names<K: Object>(&self) -> Vec<String> {
        self.cluster
            .list::<K>()
            .iter()
            .map(|o| o.meta().name.clone().unwrap_or_default())
            .collect()
    }

    fn cpu(&self, name: &str) -> String {
        let pool = self
            .pool(name)
            .unwrap_or_else(|| panic!("NodePool {name} exists"));
        let limits = serde_json::to_value(&pool.spec.limits).unwrap();
        limits["cpu"].as_str().unwrap_or_default().to_string()
    }

    fn status(&self) -> SyncStatus {
        let cm = self
            .cluster
            .get::<ConfigMap>(&ObjectKey::new("dovetail", "dovetail-sync-status"))
            .expect("the status ConfigMap exists");
        SyncStatus::from_data(cm.data.as_ref().unwrap())
    }

    fn events(&self) -> Vec<(String, String, String)> {
        self.cluster
            .list::<Event>()
            .iter()
            .map(|e| {
                (
                    e.type_.clone().unwrap_or_default(),
                    e.reason.clone().unwrap_or_default(),
                    e.message.clone().unwrap_or_default(),
                )
            })
            .collect()
    }
}

fn annotation(pool: &NodePool, key: &str) -> String {
    pool.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
        .unwrap_or_default()
}

fn revision(sha: &str) -> String {
    format!("main@sha1:{sha}")
}

#[test]
fn a_valid_commit_is_applied_with_the_conventions_labels_and_status() {
    let mut repo = base_repo();
    let sha = repo.git.head().unwrap().target().unwrap().to_string();
    let mut h = harness(repo.path(), |_| {});
    match h.sync() {
        Outcome::Applied {
            revision: r,
            created,
            updated,
            pruned,
        } => {
            assert_eq!(r, revision(&sha));
            // EC2NodeClasses before NodePools.
            assert_eq!(
                created,
                ["EC2NodeClass/default", "NodePool/a", "NodePool/b"]
            );
            assert!(updated.is_empty() && pruned.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let a = h.pool("a").unwrap();
    assert_eq!(
        a.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
        "dovetail"
    );
    assert_eq!(annotation(&a, "dovetail.dev/revision"), revision(&sha));
    assert_eq!(annotation(&a, "dovetail.dev/source"), "nodepools/a.yaml");
    assert_eq!(h.names::<EC2NodeClass>(), ["default"]);

    let status = h.status();
    assert_eq!(status.last_applied_revision, Some(revision(&sha)));
    assert_eq!(status.last_attempted_revision, Some(revision(&sha)));
    assert!(status.ready);
    assert_eq!(
        status.inventory,
        ["EC2NodeClass/default", "NodePool/a", "NodePool/b"]
    );
    assert_eq!(h.events().len(), 1);
    assert_eq!(h.events()[0].1, "Applied");
    let metrics = h.engine.metrics().text();
    assert!(
        metrics.contains(&format!(
            "dovetail_config_revision_info{{revision=\"{}\"}} 1",
            revision(&sha)
        )),
        "{metrics}"
    );
    assert!(metrics.contains("dovetail_config_objects{kind=\"NodePool\"} 2"));

    // Nothing new: nothing written, no new Event.
    let rv = h.cluster.resource_version();
    assert!(matches!(h.sync(), Outcome::UpToDate { .. }));
    assert_eq!(h.cluster.resource_version(), rv);

    // A change to one object updates only that object.
    repo.write("nodepools/b.yaml", &nodepool("b", "20"));
    let sha2 = repo.commit("raise b");
    match h.sync() {
        Outcome::Applied {
            updated, created, ..
        } => {
            assert_eq!(updated, ["NodePool/b"]);
            assert!(created.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.cpu("b"), "20");
    assert_eq!(
        annotation(&h.pool("b").unwrap(), "dovetail.dev/revision"),
        revision(&sha2)
    );
    assert_eq!(
        annotation(&h.pool("a").unwrap(), "dovetail.dev/revision"),
        revision(&sha)
    );
}

#[test]
fn an_invalid_commit_is_not_applied_and_a_fixed_commit_then_is() {
    let mut repo = base_repo();
    let good = repo.git.head().unwrap().target().unwrap().to_string();
    let mut h = harness(repo.path(), |_| {});
    assert!(matches!(h.sync(), Outcome::Applied { .. }));

    // One valid change and one invalid file in the same commit: neither is applied.
    repo.write("nodepools/a.yaml", &nodepool("a", "99"));
    repo.write(
        "nodepools/b.yaml",
        &nodepool("b", "10").replace("  limits:", "  limitz: {}\n  limits:"),
    );
    let bad = repo.commit("typo");
    let rv = h.cluster.resource_version();
    match h.sync() {
        Outcome::Invalid {
            revision: r,
            diagnostics,
        } => {
            assert_eq!(r, revision(&bad));
            let d = &diagnostics[0];
            assert_eq!(d.file, "nodepools/b.yaml");
            assert_eq!(d.line, 13, "{d}");
            assert!(d.message.contains("limitz"), "{d}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.cpu("a"), "10");
    assert_eq!(
        annotation(&h.pool("a").unwrap(), "dovetail.dev/revision"),
        revision(&good)
    );
    let status = h.status();
    assert_eq!(status.last_applied_revision, Some(revision(&good)));
    assert_eq!(status.last_attempted_revision, Some(revision(&bad)));
    assert!(!status.ready);
    assert_eq!(status.reason, "InvalidRevision");
    assert!(
        status.last_error.contains("nodepools/b.yaml:13:"),
        "{}",
        status.last_error
    );
    assert!(
        status.message.contains("nothing applied"),
        "{}",
        status.message
    );
    let events = h.events();
    let warning = events
        .iter()
        .find(|e| e.0 == "Warning")
        .expect("a Warning Event");
    assert_eq!(warning.1, "InvalidRevision");
    assert!(warning.2.contains("nodepools/b.yaml:13:"), "{}", warning.2);
    assert_eq!(h.engine.metrics().errors("invalid"), 1);
    // Only the status and the Event were written.
    assert!(h.cluster.resource_version() <= rv + 2);

    // The same invalid head is not reported again.
    assert!(matches!(h.sync(), Outcome::StillInvalid { .. }));
    assert_eq!(h.engine.metrics().errors("invalid"), 1);

    repo.write("nodepools/b.yaml", &nodepool("b", "10"));
    let fixed = repo.commit("fix");
    assert!(matches!(h.sync(), Outcome::Applied { .. }));
    assert_eq!(h.cpu("a"), "99");
    let status = h.status();
    assert!(status.ready);
    assert_eq!(status.last_applied_revision, Some(revision(&fixed)));
    assert!(status.last_error.is_empty());
}

#[test]
fn a_transition_the_api_server_would_reject_is_reported_from_the_live_object() {
    let mut repo = base_repo();
    let mut h = harness(repo.path(), |_| {});
    assert!(matches!(h.sync(), Outcome::Applied { .. }));
    repo.write(
        "nodepools/a.yaml",
        &nodepool("a", "10").replace("  limits:\n    cpu: \"10\"\n", "  replicas: 2\n"),
    );
    repo.commit("make a static");
    match h.sync() {
        Outcome::Invalid { diagnostics, .. } => {
            assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
            assert_eq!(diagnostics[0].code, "transition");
            assert_eq!(diagnostics[0].file, "nodepools/a.yaml");
            assert!(diagnostics[0].hint.is_some());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.cpu("a"), "10");
}

#[test]
fn deleting_a_file_prunes_only_with_pruning_on() {
    let mut repo = base_repo();
    let mut off = harness(repo.path(), |_| {});
    assert!(matches!(off.sync(), Outcome::Applied { .. }));
    repo.remove("nodepools/b.yaml");
    repo.commit("drop b");
    match off.sync() {
        Outcome::Applied { pruned, .. } => assert!(pruned.is_empty()),
        other => panic!("{other:?}"),
    }
    assert_eq!(off.names::<NodePool>(), ["a", "b"]);
    // The inventory still lists what dovetail manages.
    assert!(off.status().inventory.contains(&"NodePool/b".to_string()));

    let mut on = harness_with(off.cluster.clone(), off.clock.clone(), repo.path(), |s| {
        s.prune = true
    });
    match on.sync() {
        Outcome::Applied { pruned, .. } => assert_eq!(pruned, ["NodePool/b"]),
        other => panic!("{other:?}"),
    }
    assert_eq!(on.names::<NodePool>(), ["a"]);
    assert_eq!(
        on.status().inventory,
        ["EC2NodeClass/default", "NodePool/a"]
    );
}

#[test]
fn pruning_respects_the_annotation_and_the_max_prune_guard() {
    let mut repo = Repo::new();
    repo.write("nodeclasses/default.yaml", &nodeclass("default"));
    for name in ["a", "b", "c", "d"] {
        repo.write(&format!("nodepools/{name}.yaml"), &nodepool(name, "10"));
    }
    let kept = nodepool("kept", "10").replace(
        "  name: kept\n",
        "  name: kept\n  annotations:\n    dovetail.dev/prune: disabled\n",
    );
    repo.write("nodepools/kept.yaml", &kept);
    repo.commit("five pools");
    let mut h = harness(repo.path(), |s| s.prune = true);
    assert!(matches!(h.sync(), Outcome::Applied { .. }));

    // Six managed objects: the default limit is 1. Deleting three is refused.
    for name in ["b", "c", "d", "kept"] {
        repo.remove(&format!("nodepools/{name}.yaml"));
    }
    repo.write("nodepools/a.yaml", &nodepool("a", "12"));
    repo.commit("drop three and kept");
    match h.sync() {
        Outcome::PruneBlocked {
            candidates,
            limit,
            updated,
            ..
        } => {
            assert_eq!(limit, 1);
            assert_eq!(candidates, ["NodePool/b", "NodePool/c", "NodePool/d"]);
            // The rest of the revision is applied.
            assert_eq!(updated, ["NodePool/a"]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.names::<NodePool>(), ["a", "b", "c", "d", "kept"]);
    assert_eq!(h.cpu("a"), "12");
    let status = h.status();
    assert_eq!(status.reason, "PruneBlocked");
    assert!(
        status.last_error.contains("--max-prune"),
        "{}",
        status.last_error
    );
    assert_eq!(h.engine.metrics().errors("prune_blocked"), 1);

    // A higher limit lets the three go; the annotated pool stays.
    let mut raised = harness_with(h.cluster.clone(), h.clock.clone(), repo.path(), |s| {
        s.prune = true;
        s.max_prune = Some(3);
    });
    match raised.sync() {
        Outcome::Applied { pruned, .. } => {
            assert_eq!(pruned, ["NodePool/b", "NodePool/c", "NodePool/d"]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(raised.names::<NodePool>(), ["a", "kept"]);
}

#[test]
fn force_prune_goes_past_the_limit() {
    let mut repo = base_repo();
    let mut h = harness(repo.path(), |s| {
        s.prune = true;
        s.force_prune = true;
        s.max_prune = Some(0);
    });
    assert!(matches!(h.sync(), Outcome::Applied { .. }));
    repo.remove("nodepools/a.yaml").remove("nodepools/b.yaml");
    repo.write("nodepools/c.yaml", &nodepool("c", "1"));
    repo.commit("replace a and b with c");
    match h.sync() {
        Outcome::Applied {
            pruned, created, ..
        } => {
            assert_eq!(created, ["NodePool/c"]);
            assert_eq!(pruned, ["NodePool/a", "NodePool/b"]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.names::<NodePool>(), ["c"]);
}

#[test]
fn a_force_push_or_rewind_applies_the_new_head_and_duplicates_nothing() {
    let mut repo = base_repo();
    let first = repo.git.head().unwrap().target().unwrap().to_string();
    let mut h = harness(repo.path(), |s| s.prune = true);
    assert!(matches!(h.sync(), Outcome::Applied { .. }));
    repo.write("nodepools/c.yaml", &nodepool("c", "5"));
    repo.write("nodepools/a.yaml", &nodepool("a", "20"));
    repo.commit("add c, raise a");
    assert!(matches!(h.sync(), Outcome::Applied { .. }));
    assert_eq!(h.names::<NodePool>(), ["a", "b", "c"]);

    // Rewind main to the first commit.
    repo.reset_hard(&first);
    match h.sync() {
        Outcome::Applied {
            revision: r,
            updated,
            pruned,
            created,
        } => {
            assert_eq!(r, revision(&first));
            assert_eq!(updated, ["NodePool/a"]);
            assert_eq!(pruned, ["NodePool/c"]);
            assert!(created.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.names::<NodePool>(), ["a", "b"]);
    assert_eq!(h.cpu("a"), "10");
    assert_eq!(
        annotation(&h.pool("a").unwrap(), "dovetail.dev/revision"),
        revision(&first)
    );

    // A different history on top of the rewind (a force-push).
    repo.write("nodepools/a.yaml", &nodepool("a", "30"));
    let pushed = repo.commit("rewritten history");
    assert!(matches!(h.sync(), Outcome::Applied { .. }));
    assert_eq!(h.names::<NodePool>(), ["a", "b"]);
    assert_eq!(h.cpu("a"), "30");
    assert_eq!(h.status().last_applied_revision, Some(revision(&pushed)));
    assert!(matches!(h.sync(), Outcome::UpToDate { .. }));
}

/// Fails the `fail_at`-th real (not dry-run) apply of a synced object.
struct Flaky {
    inner: MemoryCluster,
    applies: AtomicUsize,
    fail_at: AtomicUsize,
}

impl Cluster for Flaky {
    fn list<K: Object>(&self) -> dovetail::cluster::Listed<K> {
        Cluster::list(&self.inner)
    }

    fn get<K: Object>(&self, key: &ObjectKey) -> Option<Arc<K>> {
        Cluster::get(&self.inner, key)
    }

    fn revision<K: Object>(&self) -> u64 {
        Cluster::revision::<K>(&self.inner)
    }

    fn create<K: Object>(&self, obj: K) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send {
        Cluster::create(&self.inner, obj)
    }

    fn replace<K: Object>(&self, obj: K) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send {
        Cluster::replace(&self.inner, obj)
    }

    fn replace_status<K: Object>(
        &self,
        obj: K,
    ) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send {
        Cluster::replace_status(&self.inner, obj)
    }

    fn delete_with<K: Object>(
        &self,
        key: &ObjectKey,
        params: &DeleteParams,
    ) -> impl Future<Output = Result<DeleteOutcome<K>, ApiError>> + Send {
        Cluster::delete_with(&self.inner, key, params)
    }

    fn apply<K: Object>(
        &self,
        obj: K,
        params: &ApplyParams,
    ) -> impl Future<Output = Result<Arc<K>, ApiError>> + Send {
        let counted = !params.dry_run && K::kind(&()) != "ConfigMap";
        let fail = counted
            && self.applies.fetch_add(1, Ordering::SeqCst) + 1
                == self.fail_at.load(Ordering::SeqCst);
        std::future::ready(if fail {
            Err(ApiError::Internal {
                message: "injected failure".into(),
            })
        } else {
            self.inner.apply(obj, params)
        })
    }

    fn evict_with(
        &self,
        namespace: &str,
        name: &str,
        params: &dovetail::cluster::DeleteParams,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        Cluster::evict_with(&self.inner, namespace, name, params)
    }
}

#[test]
fn an_apply_that_fails_halfway_is_partial_and_converges_on_retry() {
    let repo = base_repo();
    let sha = repo.git.head().unwrap().target().unwrap().to_string();
    let clock = Arc::new(ManualClock::new(start()));
    let flaky = Arc::new(Flaky {
        inner: memory_cluster(&clock),
        applies: AtomicUsize::new(0),
        fail_at: AtomicUsize::new(2),
    });
    let mut h = harness_with(flaky.clone(), clock.clone(), repo.path(), |_| {});
    let retry_at = match h.sync() {
        Outcome::Partial {
            revision: r,
            done,
            failed,
            retry_at,
            ..
        } => {
            assert_eq!(r, revision(&sha));
            assert_eq!(done, ["EC2NodeClass/default"]);
            assert_eq!(failed, "NodePool/a");
            retry_at
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(h.names::<NodePool>(), Vec::<String>::new());
    let status = h.status();
    assert!(
        status
            .message
            .starts_with(&format!("partially applied at revision {}", revision(&sha))),
        "{}",
        status.message
    );
    assert_eq!(status.reason, "PartiallyApplied");
    assert_eq!(status.last_applied_revision, None);
    assert_eq!(status.inventory, ["EC2NodeClass/default"]);
    assert_eq!(h.engine.next_retry(), Some(retry_at));

    // Not yet due: nothing happens.
    assert!(matches!(h.sync(), Outcome::Waiting { .. }));
    // Fails again when due: the backoff doubles.
    flaky.fail_at.store(3, Ordering::SeqCst);
    h.clock.set(retry_at).unwrap();
    let second = match h.sync() {
        Outcome::Partial {
            retry_at: r2, done, ..
        } => {
            assert!(done.is_empty(), "{done:?}");
            r2
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(
        second.duration_since(retry_at),
        retry_at.duration_since(start()) * 2
    );
    h.clock.set(second).unwrap();
    match h.sync() {
        Outcome::Applied { created, .. } => assert_eq!(created, ["NodePool/a", "NodePool/b"]),
        other => panic!("{other:?}"),
    }
    assert!(h.status().ready);
    assert_eq!(h.engine.next_retry(), None);
    assert_eq!(h.engine.metrics().errors("apply"), 2);
    // The classes were not created twice.
    assert_eq!(h.names::<EC2NodeClass>(), ["default"]);
}

/// Lays out a git-sync v4 root: each commit is checked out into
/// `.worktrees/<n>` and the link `current` is swapped to it atomically.
struct GitSync {
    root: tempfile::TempDir,
    n: i64,
}

impl GitSync {
    fn new() -> Self {
        GitSync {
            root: tempfile::tempdir().unwrap(),
            n: 0,
        }
    }

    fn link(&self) -> PathBuf {
        self.root.path().join("current")
    }

    /// Publishes a worktree with `files` and swaps the link to it.
    fn publish(&mut self, files: &[(&str, String)]) -> String {
        self.n += 1;
        let rel = format!(".worktrees/{}", self.n);
        let dir = self.root.path().join(&rel);
        std::fs::create_dir_all(&dir).unwrap();
        let git = init(&dir);
        for (path, content) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        let sha = commit_all(&git, "sync", self.n).to_string();
        let tmp = self.root.path().join(".current.tmp");
        std::os::unix::fs::symlink(&rel, &tmp).unwrap();
        std::fs::rename(&tmp, self.link()).unwrap();
        sha
    }
}

/// Waits (up to 20 s of wall time) until `done` holds.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The cpu limit of NodePool `name` as the harness's cluster holds it.
fn limit_cpu(
    h: &Harness<MemoryCluster>,
    name: &str,
) -> impl Fn() -> Option<serde_json::Value> + use<> {
    let cluster = h.cluster.clone();
    let key = ObjectKey::cluster(name);
    move || {
        cluster
            .get_opt::<NodePool>(&key)
            .map(|p| serde_json::to_value(&p.spec.limits).unwrap()["cpu"].clone())
    }
}

/// Runs the engine under a watcher of `path`, with no poll (so only the
/// watcher can wake it), while `body` runs; then stops it and returns it
/// with what `body` returned.
fn under_watcher<T>(
    mut engine: SyncEngine<MemoryCluster>,
    path: &Path,
    body: impl AsyncFnOnce() -> T,
) -> (SyncEngine<MemoryCluster>, T) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let watcher = watch::RepoWatcher::new(path).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            watch::run(
                &mut engine,
                Some(watcher),
                Duration::from_secs(3600),
                |_| {},
                async {
                    let _ = stopped.await;
                },
            )
            .await;
            engine
        });
        let out = body().await;
        stop.send(()).unwrap();
        (task.await.unwrap(), out)
    })
}

#[test]
fn a_git_sync_symlink_swap_is_picked_up_by_the_watcher() {
    let mut gs = GitSync::new();
    let pool = |cpu: &str| {
        vec![
            ("default.yaml", nodeclass("default")),
            ("pool.yaml", nodepool("a", cpu)),
        ]
    };
    gs.publish(&pool("10"));
    let h = harness(&gs.link(), |_| {});
    let cpu = limit_cpu(&h, "a");
    let (engine, sha3) = under_watcher(h.engine, &gs.link(), async || {
        eventually("the first revision", || cpu() == Some("10".into())).await;
        let sha = gs.publish(&pool("20"));
        eventually("the swapped revision", || cpu() == Some("20".into())).await;
        let sha3 = gs.publish(&pool("30"));
        eventually("the second swap", || cpu() == Some("30".into())).await;
        assert_ne!(sha, sha3);
        sha3
    });
    assert_eq!(
        engine.status().last_applied_revision,
        Some(format!("main@sha1:{sha3}"))
    );
    assert_eq!(
        h.cluster
            .list::<NodePool>(None, &Selector::everything())
            .items
            .len(),
        1
    );
}

#[test]
fn a_commit_on_the_branch_is_picked_up_by_the_watcher() {
    let mut repo = base_repo();
    let h = harness(repo.path(), |_| {});
    let cpu = limit_cpu(&h, "b");
    let path = repo.path().to_path_buf();
    under_watcher(h.engine, &path, async || {
        eventually("the first revision", || cpu() == Some("10".into())).await;
        repo.write("nodepools/b.yaml", &nodepool("b", "40"));
        repo.commit("raise b");
        eventually("the commit", || cpu() == Some("40".into())).await;
    });
}

fn assert_nothing_applied(h: &Harness<MemoryCluster>) {
    assert!(h.names::<NodePool>().is_empty());
    assert!(h.names::<EC2NodeClass>().is_empty());
}

#[test]
fn a_path_that_is_not_a_repository_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pool.yaml"), nodepool("a", "1")).unwrap();
    // A temp dir may sit inside a repository on some machines.
    if Repository::discover(dir.path()).is_ok() {
        return;
    }
    let mut h = harness(dir.path(), |_| {});
    match h.sync() {
        Outcome::Source { error } => {
            assert_eq!(error.metric_label(), "not_a_repository");
            assert!(error.to_string().contains("is not in a git repository"));
            assert!(error.hint().is_some());
        }
        other => panic!("{other:?}"),
    }
    assert_nothing_applied(&h);
    assert_eq!(h.status().reason, "SourceError");
    assert_eq!(h.engine.metrics().errors("source"), 1);

    let path = dir.path().to_str().unwrap();
    let out = dovetail(&["sync", path, "--once"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("is not in a git repository"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("hint:"), "{}", out.stderr);

    let missing = dir.path().join("missing");
    let out = dovetail(&["sync", missing.to_str().unwrap(), "--once"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
}

#[test]
fn a_ref_that_does_not_exist_is_a_clear_error() {
    let repo = base_repo();
    let mut h = harness(repo.path(), |s| s.git_ref = "mian".into());
    match h.sync() {
        Outcome::Source { error } => {
            assert_eq!(error.metric_label(), "ref_not_found");
            assert!(error.to_string().contains("ref `mian` does not exist"));
            assert!(error.hint().unwrap().contains("main"), "{:?}", error.hint());
        }
        other => panic!("{other:?}"),
    }
    assert_nothing_applied(&h);
    let out = dovetail(&[
        "sync",
        repo.path().to_str().unwrap(),
        "--ref",
        "mian",
        "--once",
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("ref `mian` does not exist"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("hint: did you mean `main`?"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_corrupt_object_is_a_clear_error() {
    let repo = base_repo();
    // Overwrite the loose object of the NodePool `b` blob with garbage.
    let head = repo.git.head().unwrap().peel_to_tree().unwrap();
    let blob = head
        .get_path(Path::new("nodepools/b.yaml"))
        .unwrap()
        .id()
        .to_string();
    let object = repo
        .path()
        .join(".git/objects")
        .join(&blob[..2])
        .join(&blob[2..]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&object, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&object, b"this is not a zlib stream").unwrap();

    let mut h = harness(repo.path(), |_| {});
    match h.sync() {
        Outcome::Invalid { diagnostics, .. } => {
            assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
            assert_eq!(diagnostics[0].file, "nodepools/b.yaml");
            assert!(
                diagnostics[0].message.contains("cannot read"),
                "{}",
                diagnostics[0]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_nothing_applied(&h);
    assert!(!h.status().ready);
}

#[test]
fn a_100_mb_file_in_the_commit_is_a_clear_error() {
    let mut repo = base_repo();
    let mut h = harness(repo.path(), |_| {});
    assert!(matches!(h.sync(), Outcome::Applied { .. }));
    repo.write("nodepools/a.yaml", &nodepool("a", "50"));
    repo.write("huge.yaml", &"a: b\n".repeat(20 * 1024 * 1024));
    repo.commit("huge");
    match h.sync() {
        Outcome::Invalid { diagnostics, .. } => {
            assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
            assert_eq!(diagnostics[0].file, "huge.yaml");
            assert_eq!(diagnostics[0].code, "file-too-large");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.cpu("a"), "10");
}

#[test]
fn sync_help_lists_the_flags() {
    let out = dovetail(&["sync", "--help"]);
    assert_eq!(out.code, 0);
    let help = format!("{}{}", out.stdout, out.stderr);
    for flag in [
        "--ref",
        "--once",
        "--prune",
        "--max-prune",
        "--force-prune",
        "--poll-interval",
    ] {
        assert!(help.contains(flag), "{flag} in {help}");
    }
    let out = dovetail(&["sync", ".", "--poll-interval", "soon", "--once"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--poll-interval"), "{}", out.stderr);
}

/// The `commit` step of `dovetail simulate`: a commit raising a NodePool's
/// limit lets pending pods run, an invalid commit is reported and not
/// applied, and a later commit adds a NodePool; commit shas come from the
/// virtual clock, so two runs agree.
#[test]
fn simulate_commit_steps_are_synced_into_the_simulated_cluster() {
    let run = || {
        let out = dovetail(&[
            "simulate",
            "tests/scenarios/commit.yaml",
            "--output",
            "json",
        ]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        out.stdout
    };
    let (first, second) = (run(), run());
    assert_eq!(first, second, "the same scenario gives the same report");
    let report: serde_json::Value = serde_json::from_str(&first).unwrap();
    let commits: Vec<(f64, String, String)> = report["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "Commit")
        .map(|e| {
            (
                e["t"].as_f64().unwrap(),
                e["reason"].as_str().unwrap().to_string(),
                e["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let reasons: Vec<(f64, &str)> = commits.iter().map(|(t, r, _)| (*t, r.as_str())).collect();
    assert_eq!(
        reasons,
        [
            // The first sync adopts what the simulation applied at the start.
            (600.0, "ConfigApplied"),
            (600.0, "ConfigApplied"),
            (1200.0, "ConfigInvalid"),
            (1800.0, "ConfigApplied"),
        ]
    );
    assert!(
        commits[1].2.ends_with("updated NodePool/small"),
        "{}",
        commits[1].2
    );
    assert!(
        commits[2].2.contains(
            "nothing applied: nodepools/typo.yaml:10:3: error: NodePool/typo: spec.limitz"
        ),
        "{}",
        commits[2].2
    );
    assert!(
        commits[3].2.ends_with("created NodePool/typo"),
        "{}",
        commits[3].2
    );
    // With the limit raised, every pod ran.
    assert_eq!(report["unschedulable"], serde_json::json!([]));
    let pods = report["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 20);
    assert!(pods.iter().all(|p| p["node"].is_string()), "{pods:?}");
    // Pods were pending until the commit at 10m and no longer.
    let max_pending = report["summary"]["max_pending_seconds"].as_f64().unwrap();
    assert!((600.0..900.0).contains(&max_pending), "{max_pending}");

    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../schemas/scenario.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let text = std::fs::read_to_string("tests/scenarios/commit.yaml").unwrap();
    let parsed = dovetail::config::yaml::parse_documents(
        "commit.yaml",
        text.as_bytes(),
        &Default::default(),
    );
    let doc = parsed.docs[0].root.to_json();
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
}
