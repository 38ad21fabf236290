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

use super::scenario::{CommitFile, CommitStep};
use crate::clock::{Clock, Timestamp};
use crate::fsutil::{self, WriteError};
use crate::sync::{Outcome, Settings, SyncEngine};
use crate::world::MemoryCluster;

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
    /// The sync engine's metrics registry (`dovetail_config_*`).
    pub fn metrics_registry(&self) -> &prometheus::Registry {
        self.engine.metrics().registry()
    }

    /// Copies `config` into a new repository and commits it at `start`.
    pub fn new(
        config: &Path,
        cluster: Arc<MemoryCluster>,
        clock: Arc<dyn Clock>,
        start: Timestamp,
        gates: crate::controller::features::FeatureGates,
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
        let mut settings = Settings::new(dir.path());
        settings.static_capacity = gates.static_capacity;
        settings.node_overlay = gates.node_overlay;
        settings.capacity_buffer = gates.capacity_buffer;
        let engine = SyncEngine::new(cluster, clock, settings);
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
        for f in &step.files {
            write_step_file(self.dir.path(), step, f)?;
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

/// Writes or deletes one file of a step in the private repository, never
/// through a symlink; an error names the scenario's file, line and column.
fn write_step_file(root: &Path, step: &CommitStep, f: &CommitFile) -> Result<(), String> {
    let at = format!("{}:{}:{}", step.scenario, f.pos.line, f.pos.column);
    let rel = Path::new(&f.path);
    let result = match &f.content {
        Some(bytes) => fsutil::write_inside(root, rel, bytes),
        None => fsutil::remove_inside(root, rel),
    };
    result.map_err(|e| {
        let why = match e {
            WriteError::Symlink { .. } => {
                "it passes through a symlink in the configuration repository, and a commit step never writes through a symlink".to_string()
            }
            WriteError::Missing { .. } => "it is not in the configuration repository".to_string(),
            WriteError::Directory { .. } => "it is a directory".to_string(),
            WriteError::NotADirectory { path } => format!(
                "{} is a file",
                path.strip_prefix(root).unwrap_or(&path).display()
            ),
            other => other.to_string(),
        };
        let verb = if f.content.is_some() { "write" } else { "delete" };
        format!("{at}: commit: cannot {verb} {}: {why}", f.path)
    })
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

/// Copies a directory tree, leaving out `.git`. Symlinks are copied as
/// symlinks, never followed: the repository reader resolves them inside the
/// repository or refuses them, and writes never pass through them.
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

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::diag::Pos;

    /// Should a symlink appear after the scenario was checked, the write is
    /// still refused, naming the scenario's line.
    #[test]
    fn a_step_file_is_never_written_through_a_symlink() {
        let outside = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("linkdir")).unwrap();
        let file = |path: &str, content: Option<&str>| CommitFile {
            path: path.into(),
            content: content.map(|c| c.as_bytes().to_vec()),
            pos: Pos { line: 7, column: 9 },
        };
        let step = CommitStep {
            message: "m".into(),
            files: Vec::new(),
            prune: false,
            scenario: "s.yaml".into(),
        };
        let err =
            write_step_file(root.path(), &step, &file("linkdir/w.yaml", Some("x"))).unwrap_err();
        assert_eq!(
            err,
            "s.yaml:7:9: commit: cannot write linkdir/w.yaml: it passes through a symlink in the configuration repository, and a commit step never writes through a symlink"
        );
        let err = write_step_file(root.path(), &step, &file("gone.yaml", None)).unwrap_err();
        assert_eq!(
            err,
            "s.yaml:7:9: commit: cannot delete gone.yaml: it is not in the configuration repository"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        write_step_file(root.path(), &step, &file("pools/a.yaml", Some("a"))).unwrap();
        assert!(root.path().join("pools/a.yaml").is_file());
    }
}
