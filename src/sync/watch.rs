//! Waking the sync engine when the repository changes, with `notify`, and
//! the loop that runs it ([`run`]).
//!
//! What is watched ([`targets`]), so that every way a new commit arrives is
//! seen:
//! - the git directory (`HEAD` of a checkout or worktree), not recursively;
//! - the common git directory (`HEAD`, `packed-refs`) and its `refs/`
//!   recursively (a commit, a fetch, a force-push, a branch reset);
//! - when PATH is a symlink, its parent directory: git-sync v4 publishes
//!   each commit as a new worktree and atomically swaps the `--link`
//!   symlink to it (a rename in the parent directory).
//!
//! The targets are recomputed after every pass, since a swapped link leads
//! to another worktree. Lock files and the index are ignored. Events
//! arriving within [`DEBOUNCE`] of each other wake the engine once. A poll
//! (`--poll-interval`, default 60s) is the fallback for filesystems without
//! change notification (some network and overlay filesystems).

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::{Outcome, SyncEngine};
use crate::cluster::Cluster;

/// Events this close together wake the engine once: a commit writes the
/// ref through a lock file and a rename within microseconds.
pub const DEBOUNCE: Duration = Duration::from_millis(10);
/// The default fallback poll, as Flux's default interval.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(60);

/// A path to watch, and whether below it too.
pub type Target = (PathBuf, bool);

/// The paths to watch for the repository at `path` (see the module
/// documentation). Paths that do not exist are left out.
pub fn targets(path: &Path) -> BTreeSet<Target> {
    let mut out = BTreeSet::new();
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
        && let Some(parent) = path.parent()
    {
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        out.insert((parent.to_path_buf(), false));
    }
    if let Ok(repo) = git2::Repository::discover(path) {
        out.insert((repo.path().to_path_buf(), false));
        let common = repo.commondir().to_path_buf();
        out.insert((common.clone(), false));
        let refs = common.join("refs");
        if refs.is_dir() {
            out.insert((refs, true));
        }
    }
    out.into_iter()
        .filter(|(p, _)| p.exists())
        .map(|(p, r)| (std::fs::canonicalize(&p).unwrap_or(p), r))
        .collect()
}

/// Whether a change to `path` can mean a new commit.
fn relevant(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    !(name.ends_with(".lock") || name == "index" || name == "COMMIT_EDITMSG")
}

/// Watches a repository and reports changes.
pub struct RepoWatcher {
    path: PathBuf,
    watcher: RecommendedWatcher,
    watched: BTreeSet<Target>,
    changes: mpsc::UnboundedReceiver<()>,
}

impl std::fmt::Debug for RepoWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepoWatcher")
            .field("path", &self.path)
            .field("watched", &self.watched)
            .finish_non_exhaustive()
    }
}

impl RepoWatcher {
    /// Starts watching the repository at `path`.
    pub fn new(path: &Path) -> Result<Self, notify::Error> {
        let (tx, changes) = mpsc::unbounded_channel();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let wake = match &event {
                Ok(e) => {
                    !matches!(e.kind, EventKind::Access(_))
                        && (e.paths.is_empty() || e.paths.iter().any(|p| relevant(p)))
                }
                // A dropped event queue may have hidden a change.
                Err(_) => true,
            };
            if wake {
                let _ = tx.send(());
            }
        })?;
        let mut w = RepoWatcher {
            path: path.to_path_buf(),
            watcher,
            watched: BTreeSet::new(),
            changes,
        };
        w.refresh();
        Ok(w)
    }

    /// What is watched now.
    pub fn watched(&self) -> &BTreeSet<Target> {
        &self.watched
    }

    /// Re-targets the watches at what the repository's layout is now.
    pub fn refresh(&mut self) {
        let wanted = targets(&self.path);
        for gone in self.watched.difference(&wanted) {
            let _ = self.watcher.unwatch(&gone.0);
        }
        let mut now = BTreeSet::new();
        for t in &wanted {
            if self.watched.contains(t) {
                now.insert(t.clone());
                continue;
            }
            let mode = if t.1 {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            match self.watcher.watch(&t.0, mode) {
                Ok(()) => {
                    now.insert(t.clone());
                }
                Err(error) => {
                    tracing::warn!(path = %t.0.display(), %error, "cannot watch; relying on the poll");
                }
            }
        }
        self.watched = now;
    }

    /// Resolves at the next change (after [`DEBOUNCE`] of quiet).
    pub async fn changed(&mut self) {
        if self.changes.recv().await.is_none() {
            // The watcher thread is gone: never wake (the poll still does).
            std::future::pending::<()>().await;
        }
        loop {
            tokio::time::sleep(DEBOUNCE).await;
            let mut more = false;
            while self.changes.try_recv().is_ok() {
                more = true;
            }
            if !more {
                return;
            }
        }
    }
}

/// Runs the engine until `shutdown` resolves: a pass now, then one after
/// each change the watcher reports, at each due retry, and at least every
/// `poll_interval`. `on_pass` sees every outcome.
pub async fn run<C: Cluster>(
    engine: &mut SyncEngine<C>,
    mut watcher: Option<RepoWatcher>,
    poll_interval: Duration,
    mut on_pass: impl FnMut(&Outcome),
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let outcome = engine.sync().await;
        on_pass(&outcome);
        if let Some(w) = watcher.as_mut() {
            w.refresh();
        }
        let mut wait = poll_interval;
        if let Some(at) = engine.next_retry() {
            let now = engine.clock().now();
            let due = if at > now {
                Duration::try_from(at.duration_since(now)).unwrap_or_default()
            } else {
                Duration::ZERO
            };
            wait = wait.min(due);
        }
        let changed = async {
            match watcher.as_mut() {
                Some(w) => w.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut shutdown => return,
            () = changed => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkout_watches_its_git_dir_and_refs_and_a_link_its_parent() {
        let dir = tempfile::tempdir().unwrap();
        let repo_dir = dir.path().join("repo");
        git2::Repository::init(&repo_dir).unwrap();
        let t = targets(&repo_dir);
        let git = std::fs::canonicalize(repo_dir.join(".git")).unwrap();
        assert!(t.contains(&(git.clone(), false)), "{t:?}");
        assert!(t.contains(&(git.join("refs"), true)), "{t:?}");

        let link = dir.path().join("current");
        std::os::unix::fs::symlink(&repo_dir, &link).unwrap();
        let t = targets(&link);
        let parent = std::fs::canonicalize(dir.path()).unwrap();
        assert!(t.contains(&(parent, false)), "{t:?}");
        assert!(t.contains(&(git, false)), "{t:?}");
    }

    #[test]
    fn lock_files_and_the_index_do_not_wake_the_engine() {
        assert!(!relevant(Path::new(".git/refs/heads/main.lock")));
        assert!(!relevant(Path::new(".git/index")));
        assert!(relevant(Path::new(".git/refs/heads/main")));
        assert!(relevant(Path::new(".git/packed-refs")));
        assert!(relevant(Path::new("/git/current")));
    }

    #[test]
    fn a_plain_directory_has_nothing_to_watch() {
        let dir = tempfile::tempdir().unwrap();
        // A temp dir may sit inside a repository on some machines; only
        // check the case where it does not.
        if git2::Repository::discover(dir.path()).is_err() {
            assert!(targets(dir.path()).is_empty());
        }
    }
}
