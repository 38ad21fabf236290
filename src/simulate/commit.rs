//! The `commit` step of a scenario: a private git copy of the scenario's
//! configuration repository, commits made at virtual times, and the sync
//! engine applying them to the simulated cluster.
//!
//! At the first `commit` step, the configuration directory (the files on
//! disk, as the simulation read them at the start; `.git` left out) is
//! copied into a temporary repository and committed as it was at the
//! scenario's start. A first sync adopts the objects the simulation applied
//! at the start (they gain dovetail's labels and annotations). Each step
//! then writes and deletes its files and commits with author and committer
//! times from the virtual clock and a fixed identity, so the shas (and so
//! the report) are the same on every run.

use std::path::Path;
use std::sync::Arc;

use git2::{IndexAddOption, Repository, RepositoryInitOptions, Signature, Time};

use super::scenario::CommitStep;
use crate::clock::{Clock, Timestamp};
use crate::cluster::MemoryCluster;
use crate::sync::{Outcome, Settings, SyncEngine};

/// The identity of simulated commits.
const AUTHOR: (&str, &str) = ("dovetail simulate", "simulate@dovetail.dev");

/// A report event: object, reason, message.
pub type CommitEvent = (String, &'static str, String);

/// The private configuration repository of a simulation and its sync engine.
pub struct ConfigRepo {
    dir: tempfile::TempDir,
    git: Repository,
    engine: SyncEngine<MemoryCluster>,
    /// Whether the initial commit has been synced.
    adopted: bool,
}

impl std::fmt::Debug for ConfigRepo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigRepo")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

fn git_err(what: &str) -> impl FnOnce(git2::Error) -> String + '_ {
    move |e| format!("commit: {what}: {}", e.message())
}

impl ConfigRepo {
    /// Copies `config` into a new repository and commits it at `start`.
    pub fn new(
        config: &Path,
        cluster: Arc<MemoryCluster>,
        clock: Arc<dyn Clock>,
        start: Timestamp,
    ) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("dovetail-simulate-config-")
            .tempdir()
            .map_err(|e| format!("commit: cannot create a temporary repository: {e}"))?;
        copy_dir(config, dir.path())
            .map_err(|e| format!("commit: cannot copy {}: {e}", config.display()))?;
        let mut opts = RepositoryInitOptions::new();
        opts.initial_head("main");
        let git = Repository::init_opts(dir.path(), &opts)
            .map_err(git_err("cannot create a temporary repository"))?;
        commit(&git, "the configuration at the start", start)?;
        let engine = SyncEngine::new(cluster, clock, Settings::new(dir.path()));
        Ok(ConfigRepo {
            dir,
            git,
            engine,
            adopted: false,
        })
    }

    /// Writes the step's files, commits at `now`, and syncs. Returns the
    /// report events.
    pub async fn commit(
        &mut self,
        step: &CommitStep,
        now: Timestamp,
    ) -> Result<Vec<CommitEvent>, String> {
        let mut events = Vec::new();
        if !self.adopted {
            let outcome = self.engine.sync().await;
            events.extend(event(&outcome));
            self.adopted = true;
        }
        for (path, content) in &step.files {
            let full = self.dir.path().join(path);
            match content {
                Some(bytes) => {
                    if let Some(parent) = full.parent() {
                        std::fs::create_dir_all(parent)
                            .map_err(|e| format!("commit: cannot create {path}: {e}"))?;
                    }
                    std::fs::write(&full, bytes)
                        .map_err(|e| format!("commit: cannot write {path}: {e}"))?;
                }
                None => match std::fs::remove_file(&full) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Err(format!(
                            "commit: cannot delete {path}: it is not in the configuration repository"
                        ));
                    }
                    Err(e) => return Err(format!("commit: cannot delete {path}: {e}")),
                },
            }
        }
        commit(&self.git, &step.message, now)?;
        self.engine.settings_mut().prune = step.prune;
        let mut outcome = self.engine.sync().await;
        // A failed write is retried at once: the in-memory server has no
        // transient failures, so a second failure is reported as it is.
        if matches!(
            outcome,
            Outcome::Partial { .. } | Outcome::ClusterError { .. }
        ) {
            self.engine.retry_now();
            outcome = self.engine.sync().await;
        }
        events.extend(event(&outcome));
        Ok(events)
    }
}

/// Commits everything in the work tree on `main` at `at`.
fn commit(git: &Repository, message: &str, at: Timestamp) -> Result<(), String> {
    let mut index = git.index().map_err(git_err("cannot read the index"))?;
    index
        .add_all(["*"], IndexAddOption::DEFAULT, None)
        .map_err(git_err("cannot stage the files"))?;
    index
        .update_all(["*"], None)
        .map_err(git_err("cannot stage deletions"))?;
    index.write().map_err(git_err("cannot write the index"))?;
    let tree_id = index
        .write_tree()
        .map_err(git_err("cannot write the tree"))?;
    let tree = git
        .find_tree(tree_id)
        .map_err(git_err("cannot read the tree"))?;
    let time = Time::new(at.as_second(), 0);
    let sig = Signature::new(AUTHOR.0, AUTHOR.1, &time).map_err(git_err("bad signature"))?;
    let parent = git.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<_> = parent.iter().collect();
    git.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)
        .map_err(git_err("cannot commit"))?;
    Ok(())
}

/// Copies a directory tree, leaving out `.git`; symlinks stay symlinks.
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(from)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let name = entry.file_name();
        if name == ".git" {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if kind.is_dir() {
            std::fs::create_dir(&dst)?;
            copy_dir(&src, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// The report event of a sync outcome (none when nothing happened).
fn event(outcome: &Outcome) -> Option<CommitEvent> {
    let object = |revision: &str| {
        let sha = revision.rsplit(':').next().unwrap_or(revision);
        format!("Commit/{}", &sha[..sha.len().min(12)])
    };
    let list = |created: &[String], updated: &[String], pruned: &[String]| {
        let mut parts = Vec::new();
        for (verb, objects) in [
            ("created", created),
            ("updated", updated),
            ("pruned", pruned),
        ] {
            if !objects.is_empty() {
                parts.push(format!("{verb} {}", objects.join(", ")));
            }
        }
        if parts.is_empty() {
            "no changes".to_string()
        } else {
            parts.join("; ")
        }
    };
    Some(match outcome {
        Outcome::Applied {
            revision,
            created,
            updated,
            pruned,
        } => (
            object(revision),
            "ConfigApplied",
            format!("{revision}: {}", list(created, updated, pruned)),
        ),
        Outcome::Invalid {
            revision,
            diagnostics,
        } => (
            object(revision),
            "ConfigInvalid",
            format!(
                "{revision} is invalid, nothing applied: {}",
                diagnostics
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ),
        Outcome::PruneBlocked {
            revision,
            created,
            updated,
            candidates,
            limit,
        } => (
            object(revision),
            "ConfigPruneBlocked",
            format!(
                "{revision}: {}; pruning {} exceeds the limit of {limit}, nothing pruned",
                list(created, updated, &[]),
                candidates.join(", ")
            ),
        ),
        Outcome::Partial {
            revision,
            failed,
            error,
            ..
        } => (
            object(revision),
            "ConfigPartiallyApplied",
            format!("partially applied at revision {revision}: {failed}: {error}"),
        ),
        Outcome::ClusterError {
            revision, error, ..
        } => (
            object(revision),
            "ConfigSyncFailed",
            format!("{revision}: {error}"),
        ),
        Outcome::Source { error } => (
            "Commit/unknown".to_string(),
            "ConfigSyncFailed",
            error.to_string(),
        ),
        Outcome::UpToDate { .. } | Outcome::StillInvalid { .. } | Outcome::Waiting { .. } => {
            return None;
        }
    })
}
