//! The two revisions `diff` compares, read from a git repository.
//!
//! With `--merge-base`, the `from` side is the merge base of the two refs, as
//! in a pull request's diff.

use std::path::{Path, PathBuf};

use git2::{ErrorCode, Oid, Repository};

use crate::config::load::{self, Loaded};
use crate::config::source::{Repo, SourceError};
use crate::config::yaml::Limits;

/// One side of a comparison: the ref as given and the commit it resolved to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Side {
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// Full hex sha of the commit read (for `--merge-base`, of the merge base).
    pub sha: String,
}

impl Side {
    /// The sha abbreviated as git does by default.
    pub fn short_sha(&self) -> &str {
        self.sha.get(..7).unwrap_or(&self.sha)
    }

    /// `main (1a2b3c4)`, or just the name for the working tree.
    pub fn label(&self) -> String {
        if self.sha.is_empty() {
            self.git_ref.clone()
        } else {
            format!("{} ({})", self.git_ref, self.short_sha())
        }
    }

    /// Whether this side is the files on disk.
    pub fn is_worktree(&self) -> bool {
        self.sha.is_empty()
    }
}

/// The name of the working-tree side of a comparison.
pub const WORKTREE: &str = "the working tree";

/// Both revisions, read and parsed.
#[derive(Debug, Clone)]
pub struct Revisions {
    pub from: Side,
    pub to: Side,
    /// Whether `from` is the merge base of the refs given.
    pub merge_base: bool,
    /// `None` when PATH does not exist at `from` (the change adds it).
    pub from_loaded: Option<Loaded>,
    pub to_loaded: Loaded,
}

/// A failure to read the revisions (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    #[error("`{}` is not in a git repository; diff compares two commits", .path.display())]
    NotARepository { path: PathBuf },
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("`{from}` and `{to}` have no common ancestor")]
    NoMergeBase { from: String, to: String },
    #[error("cannot compute the merge base of `{from}` and `{to}`")]
    MergeBase {
        from: String,
        to: String,
        #[source]
        source: git2::Error,
    },
}

impl RevisionError {
    /// A likely fix, printed as `hint:` after the error.
    pub fn hint(&self) -> Option<String> {
        match self {
            RevisionError::NotARepository { .. } => Some(
                "run diff on a git repository (or a directory inside one); `dovetail validate` checks a plain directory"
                    .to_string(),
            ),
            RevisionError::Source(e) => e.hint(),
            RevisionError::NoMergeBase { .. } => Some(
                "compare the two commits directly by leaving out --merge-base, or fetch the full history (`git fetch --unshallow`)"
                    .to_string(),
            ),
            RevisionError::MergeBase { .. } => Some(
                "check the repository with `git fsck`".to_string(),
            ),
        }
    }
}

/// Reads the configuration at `from` and `to` in the repository containing
/// `path`. With `merge_base`, the `from` side is the merge base of `from` and
/// `to` (what code review shows for a branch). When PATH does not exist on
/// the `from` side, that side is empty (the pull request adds the directory).
pub fn read(
    path: &Path,
    from: &str,
    to: &str,
    merge_base: bool,
    limits: &Limits,
) -> Result<Revisions, RevisionError> {
    let repo = Repo::open(path)?.ok_or_else(|| RevisionError::NotARepository {
        path: path.to_path_buf(),
    })?;
    let from_commit = repo.resolve(from)?;
    let to_commit = repo.resolve(to)?;
    let from_sha = if merge_base {
        merge_base_of(path, from, to, &from_commit.sha, &to_commit.sha)?
    } else {
        from_commit.sha
    };
    let from_files = match repo.files_at(&from_sha, limits) {
        Ok(files) => Some(files),
        Err(SourceError::PathNotInRevision { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let to_files = repo.files_at(&to_commit.sha, limits)?;
    Ok(Revisions {
        from: Side {
            git_ref: from.to_string(),
            sha: from_sha,
        },
        to: Side {
            git_ref: to.to_string(),
            sha: to_commit.sha,
        },
        merge_base,
        from_loaded: from_files.map(|files| load::parse_files(files, limits)),
        to_loaded: load::parse_files(to_files, limits),
    })
}

/// Reads the configuration at `from` and the files on disk under `path`
/// (`diff --worktree`, as `git diff REF` compares a commit with the working
/// tree).
pub fn read_worktree(path: &Path, from: &str, limits: &Limits) -> Result<Revisions, RevisionError> {
    let repo = Repo::open(path)?.ok_or_else(|| RevisionError::NotARepository {
        path: path.to_path_buf(),
    })?;
    let from_commit = repo.resolve(from)?;
    let from_files = match repo.files_at(&from_commit.sha, limits) {
        Ok(files) => Some(files),
        Err(SourceError::PathNotInRevision { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let to_loaded = load::load(
        path,
        &crate::config::source::Revision::Worktree,
        false,
        limits,
    )?;
    Ok(Revisions {
        from: Side {
            git_ref: from.to_string(),
            sha: from_commit.sha,
        },
        to: Side {
            git_ref: WORKTREE.to_string(),
            sha: String::new(),
        },
        merge_base: false,
        from_loaded: from_files.map(|files| load::parse_files(files, limits)),
        to_loaded,
    })
}

/// Reads the configuration at one revision (the repository side of `diff
/// --cluster`).
pub fn read_one(path: &Path, rev: &str, limits: &Limits) -> Result<(Side, Loaded), RevisionError> {
    let repo = Repo::open(path)?.ok_or_else(|| RevisionError::NotARepository {
        path: path.to_path_buf(),
    })?;
    let commit = repo.resolve(rev)?;
    let files = repo.files_at(&commit.sha, limits)?;
    Ok((
        Side {
            git_ref: rev.to_string(),
            sha: commit.sha,
        },
        load::parse_files(files, limits),
    ))
}

fn merge_base_of(
    path: &Path,
    from: &str,
    to: &str,
    from_sha: &str,
    to_sha: &str,
) -> Result<String, RevisionError> {
    let failed = |source: git2::Error| RevisionError::MergeBase {
        from: from.to_string(),
        to: to.to_string(),
        source,
    };
    let repo = Repository::discover(path).map_err(failed)?;
    let (a, b) = (
        Oid::from_str(from_sha).map_err(failed)?,
        Oid::from_str(to_sha).map_err(failed)?,
    );
    match repo.merge_base(a, b) {
        Ok(oid) => Ok(oid.to_string()),
        Err(e) if e.code() == ErrorCode::NotFound => Err(RevisionError::NoMergeBase {
            from: from.to_string(),
            to: to.to_string(),
        }),
        Err(e) => Err(failed(e)),
    }
}
