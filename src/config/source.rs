//! Reading the configuration repository: the committed tree of a git ref, or
//! the files on disk, filtered by `.dovetailignore`.
//!
//! PATH may be the root of a git repository, a directory inside one (the
//! committed tree is read at that directory's prefix), or a plain directory in
//! no repository (always read from disk). Both sources go through one walker
//! (a `Source` lists directories and reads files), so ignore rules, symlink
//! handling and per-file problems behave the same for a tree and a worktree:
//!
//! - only `*.yaml` and `*.yml` files are read, recursively; `.git` is skipped;
//! - `.dovetailignore` files (gitignore syntax) apply to their directory and
//!   below, at PATH and in every subdirectory (ignore files above PATH do not
//!   apply); in tree mode they are read from the tree;
//! - a file's size is checked before it is read;
//! - symlinks are followed when their target stays inside PATH (in a git tree,
//!   a symlink is a blob whose content is the target, resolved within the
//!   tree); a directory symlink that leads back into a directory being walked
//!   is reported as a loop;
//! - a symlink leaving PATH, a dangling symlink, an unreadable or oversized
//!   file is a diagnostic for that file, and the other files are still read;
//!   a submodule or nested repository is skipped with a warning.

use std::fmt::Write as _;
use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use git2::{ErrorCode, ObjectType, Oid, Repository};
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::config::yaml::{self, Limits};
use crate::diag::Diagnostic;

/// The name of the ignore file, in gitignore syntax.
pub const IGNORE_FILE: &str = ".dovetailignore";
/// An ignore file larger than this is surely not one.
const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;
/// Symlinks resolved in a chain before giving up, as the kernel's ELOOP.
const MAX_SYMLINK_HOPS: usize = 40;
/// Deepest directory nesting walked; deeper directories are reported.
const MAX_DIR_DEPTH: usize = 256;

/// Diagnostic codes produced here.
pub mod codes {
    /// A file or directory that could not be read.
    pub const UNREADABLE: &str = "unreadable";
    /// A symlink leaving PATH, dangling, or in a loop.
    pub const SYMLINK: &str = "symlink";
    /// A submodule or nested repository, which is not read.
    pub const SUBMODULE: &str = "submodule";
    /// A `.dovetailignore` line that is not a valid pattern.
    pub const IGNORE_FILE: &str = "ignore-file";
}

/// Which version of the files to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revision {
    /// The committed tree of a git revision (`HEAD`, a branch, a tag, a sha,
    /// `HEAD~1`, ...).
    Ref(String),
    /// The files on disk.
    Worktree,
}

impl Default for Revision {
    fn default() -> Self {
        Revision::Ref("HEAD".to_string())
    }
}

/// One configuration file.
#[derive(Debug, Clone, PartialEq)]
pub struct RepoFile {
    /// Relative to PATH, with `/` separators.
    pub path: String,
    /// The bytes, or why they could not be read.
    pub content: Result<Vec<u8>, Diagnostic>,
}

/// The configuration files of one revision, sorted by path.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RepoFiles {
    pub files: Vec<RepoFile>,
    /// Problems that belong to no single YAML file: skipped submodules,
    /// symlink loops, bad ignore patterns.
    pub diagnostics: Vec<Diagnostic>,
    /// The commit read, when a git tree was read.
    pub commit: Option<CommitInfo>,
}

/// A resolved commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// Full hex sha.
    pub sha: String,
    /// The branch the revision named (or `HEAD` pointed to), if any.
    pub branch: Option<String>,
}

/// A failure of the whole command (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("path `{}` does not exist", .path.display())]
    PathNotFound { path: PathBuf },
    #[error("path `{}` is not a directory", .path.display())]
    NotADirectory { path: PathBuf },
    #[error("cannot read `{}`", .path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("ref `{rev}` does not exist")]
    RefNotFound {
        rev: String,
        /// Branch names close to `rev`.
        candidates: Vec<String>,
        /// The repository has no commit yet.
        unborn: bool,
    },
    #[error("`--ref {rev}` was given but `{}` is not in a git repository", .path.display())]
    RefWithoutRepository { path: PathBuf, rev: String },
    #[error("`{prefix}` does not exist at `{rev}`")]
    PathNotInRevision { prefix: String, rev: String },
    #[error("cannot read the git repository: {context}")]
    Git {
        context: String,
        #[source]
        source: git2::Error,
    },
}

impl SourceError {
    /// A likely fix, printed as `hint:` after the error.
    pub fn hint(&self) -> Option<String> {
        match self {
            SourceError::PathNotFound { .. } | SourceError::NotADirectory { .. } => Some(
                "pass the directory of the configuration repository (default: `.`)".to_string(),
            ),
            SourceError::Unreadable { .. } => None,
            SourceError::RefNotFound { unborn: true, .. } => Some(
                "the repository has no commit yet; commit the files or use --worktree".to_string(),
            ),
            SourceError::RefNotFound { candidates, .. } => Some(if candidates.is_empty() {
                "name an existing branch, tag or commit, or use --worktree to read the files on disk"
                    .to_string()
            } else {
                let mut hint = String::from("did you mean ");
                for (i, c) in candidates.iter().enumerate() {
                    let sep = match i {
                        0 => "",
                        _ if i + 1 == candidates.len() => " or ",
                        _ => ", ",
                    };
                    let _ = write!(hint, "{sep}`{c}`");
                }
                hint.push_str("? (or use --worktree to read the files on disk)");
                hint
            }),
            SourceError::RefWithoutRepository { .. } => {
                Some("a plain directory is read from disk; omit --ref".to_string())
            }
            SourceError::PathNotInRevision { .. } => Some(
                "commit the directory, or use --worktree to read the files on disk".to_string(),
            ),
            SourceError::Git { source, .. } if source.code() == ErrorCode::Owner => Some(
                "the repository belongs to another user; mark it safe with \
                 `git config --global --add safe.directory PATH`"
                    .to_string(),
            ),
            SourceError::Git { .. } => Some(
                "check the repository with `git fsck`, or use --worktree to read the files on disk"
                    .to_string(),
            ),
        }
    }

    /// A bounded label for metrics and tests.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SourceError::PathNotFound { .. } => "path_not_found",
            SourceError::NotADirectory { .. } => "not_a_directory",
            SourceError::Unreadable { .. } => "unreadable",
            SourceError::RefNotFound { .. } => "ref_not_found",
            SourceError::RefWithoutRepository { .. } => "ref_without_repository",
            SourceError::PathNotInRevision { .. } => "path_not_in_revision",
            SourceError::Git { .. } => "git",
        }
    }
}

fn git_error(context: impl Into<String>) -> impl FnOnce(git2::Error) -> SourceError {
    let context = context.into();
    move |source| SourceError::Git { context, source }
}

/// Reads the configuration files of `rev` under `root`, with the default limits.
///
/// In a git repository, `Revision::Ref` reads the committed tree and
/// `Revision::Worktree` the files on disk. A plain directory is always read
/// from disk; asking for a ref there is an error only when `explicit_ref` says
/// the user gave `--ref`.
pub fn read_files(
    root: &Path,
    rev: &Revision,
    explicit_ref: bool,
) -> Result<RepoFiles, SourceError> {
    read_files_with_limits(root, rev, explicit_ref, &Limits::default())
}

/// [`read_files`] with explicit limits (the file-size limit is checked before
/// reading each file).
pub fn read_files_with_limits(
    root: &Path,
    rev: &Revision,
    explicit_ref: bool,
    limits: &Limits,
) -> Result<RepoFiles, SourceError> {
    check_dir(root)?;
    match rev {
        Revision::Worktree => read_disk(root, limits),
        Revision::Ref(name) => match Repo::open(root)? {
            Some(repo) => repo.files_at(name, limits),
            None if explicit_ref => Err(SourceError::RefWithoutRepository {
                path: root.to_path_buf(),
                rev: name.clone(),
            }),
            None => read_disk(root, limits),
        },
    }
}

/// Resolves `rev` in the repository that contains `root`. `Worktree` resolves
/// `HEAD` (the commit the worktree is based on).
pub fn resolve_commit(root: &Path, rev: &Revision) -> Result<CommitInfo, SourceError> {
    check_dir(root)?;
    let name = match rev {
        Revision::Ref(name) => name.as_str(),
        Revision::Worktree => "HEAD",
    };
    match Repo::open(root)? {
        Some(repo) => repo.resolve(name),
        None => Err(SourceError::RefWithoutRepository {
            path: root.to_path_buf(),
            rev: name.to_string(),
        }),
    }
}

fn check_dir(root: &Path) -> Result<(), SourceError> {
    match fs::metadata(root) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(SourceError::NotADirectory {
            path: root.to_path_buf(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SourceError::PathNotFound {
            path: root.to_path_buf(),
        }),
        Err(source) => Err(SourceError::Unreadable {
            path: root.to_path_buf(),
            source,
        }),
    }
}

fn read_disk(root: &Path, limits: &Limits) -> Result<RepoFiles, SourceError> {
    let real_root = fs::canonicalize(root).map_err(|source| SourceError::Unreadable {
        path: root.to_path_buf(),
        source,
    })?;
    let source = Disk {
        root: real_root.clone(),
    };
    Ok(walk(&source, real_root, limits))
}

/// A git repository opened once, for reading several revisions of PATH.
pub struct Repo {
    repo: Repository,
    /// PATH relative to the repository's working directory, `/`-separated;
    /// empty at the root.
    prefix: String,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repo")
            .field("path", &self.repo.path())
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Repo {
    /// Opens the repository containing `root`, or `None` if `root` is in no
    /// repository.
    pub fn open(root: &Path) -> Result<Option<Repo>, SourceError> {
        check_dir(root)?;
        let repo = match Repository::discover(root) {
            Ok(repo) => repo,
            Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(git_error("cannot open the repository")(e)),
        };
        let real_root = fs::canonicalize(root).map_err(|source| SourceError::Unreadable {
            path: root.to_path_buf(),
            source,
        })?;
        let base = repo.workdir().unwrap_or_else(|| repo.path());
        let base = fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
        let prefix = match real_root.strip_prefix(&base) {
            Ok(rel) => rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            Err(_) => String::new(),
        };
        Ok(Some(Repo { repo, prefix }))
    }

    /// PATH relative to the repository root (`""` at the root).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Resolves a revision to its commit.
    pub fn resolve(&self, rev: &str) -> Result<CommitInfo, SourceError> {
        let commit = self.commit(rev)?;
        Ok(CommitInfo {
            sha: commit.id().to_string(),
            branch: self.branch_of(rev),
        })
    }

    /// The configuration files of PATH at `rev`.
    pub fn files_at(&self, rev: &str, limits: &Limits) -> Result<RepoFiles, SourceError> {
        let commit = self.commit(rev)?;
        let tree = commit
            .tree()
            .map_err(git_error(format!("cannot read the tree of `{rev}`")))?;
        let dir = if self.prefix.is_empty() {
            tree.id()
        } else {
            match tree.get_path(Path::new(&self.prefix)) {
                Ok(entry) if entry.kind() == Some(ObjectType::Tree) => entry.id(),
                Ok(_) => {
                    return Err(SourceError::PathNotInRevision {
                        prefix: self.prefix.clone(),
                        rev: rev.to_string(),
                    });
                }
                Err(e) if e.code() == ErrorCode::NotFound => {
                    return Err(SourceError::PathNotInRevision {
                        prefix: self.prefix.clone(),
                        rev: rev.to_string(),
                    });
                }
                Err(e) => return Err(git_error(format!("cannot read `{}`", self.prefix))(e)),
            }
        };
        let source = GitTree {
            repo: &self.repo,
            root: dir,
        };
        let mut files = walk(&source, dir, limits);
        files.commit = Some(CommitInfo {
            sha: commit.id().to_string(),
            branch: self.branch_of(rev),
        });
        Ok(files)
    }

    fn commit(&self, rev: &str) -> Result<git2::Commit<'_>, SourceError> {
        let object = match self.repo.revparse_single(rev) {
            Ok(object) => object,
            Err(e)
                if matches!(
                    e.code(),
                    ErrorCode::NotFound
                        | ErrorCode::InvalidSpec
                        | ErrorCode::UnbornBranch
                        | ErrorCode::Ambiguous
                ) =>
            {
                return Err(self.ref_not_found(rev));
            }
            Err(e) => return Err(git_error(format!("cannot resolve `{rev}`"))(e)),
        };
        object.peel_to_commit().map_err(|e| match e.code() {
            ErrorCode::NotFound | ErrorCode::InvalidSpec | ErrorCode::Peel => {
                self.ref_not_found(rev)
            }
            _ => git_error(format!("cannot read the commit of `{rev}`"))(e),
        })
    }

    fn ref_not_found(&self, rev: &str) -> SourceError {
        let unborn = matches!(self.repo.head(), Err(e) if e.code() == ErrorCode::UnbornBranch);
        SourceError::RefNotFound {
            rev: rev.to_string(),
            candidates: self.close_branches(rev),
            unborn,
        }
    }

    /// Up to three branch names within a small edit distance of `rev`.
    fn close_branches(&self, rev: &str) -> Vec<String> {
        let Ok(branches) = self.repo.branches(None) else {
            return Vec::new();
        };
        let mut scored: Vec<(usize, String)> = branches
            .filter_map(Result::ok)
            .filter_map(|(b, _)| b.name().ok().flatten().map(str::to_string))
            .filter_map(|name| {
                let d = crate::diag::edit_distance(rev, &name);
                let close = d <= (rev.len().max(name.len()) / 3).max(2)
                    || name.ends_with(&format!("/{rev}"));
                close.then_some((d, name))
            })
            .collect();
        scored.sort();
        scored.dedup();
        scored.into_iter().take(3).map(|(_, n)| n).collect()
    }

    /// The branch `rev` names, or `HEAD`'s branch for `HEAD`.
    /// The YAML files under PATH whose working copy differs from HEAD:
    /// modified, added, deleted, renamed or untracked (and not ignored by
    /// git), relative to PATH.
    pub fn uncommitted_yaml(&self) -> Result<Vec<String>, SourceError> {
        let mut opts = git2::StatusOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_ignored(false);
        if !self.prefix.is_empty() {
            opts.pathspec(format!("{}/", self.prefix));
        }
        let statuses = self
            .repo
            .statuses(Some(&mut opts))
            .map_err(git_error("cannot read the working tree's status"))?;
        let under = |p: &str| -> Option<String> {
            if self.prefix.is_empty() {
                Some(p.to_string())
            } else {
                p.strip_prefix(&format!("{}/", self.prefix))
                    .map(str::to_string)
            }
        };
        let mut out: Vec<String> = statuses
            .iter()
            .filter(|e| !e.status().is_empty() && !e.status().contains(git2::Status::IGNORED))
            .filter_map(|e| e.path().ok().and_then(under))
            .filter(|p| is_yaml(p.rsplit('/').next().unwrap_or(p)))
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn branch_of(&self, rev: &str) -> Option<String> {
        let reference = if rev == "HEAD" {
            self.repo.head().ok()?
        } else {
            self.repo.resolve_reference_from_short_name(rev).ok()?
        };
        if reference.is_branch() || reference.is_remote() {
            reference.shorthand().ok().map(str::to_string)
        } else {
            None
        }
    }
}

// ---------------------------------------------------------------------------
// The walker, shared by the disk and the git tree.

/// What a directory entry is.
enum Kind<D, F> {
    File(F),
    Dir(D),
    Symlink,
    Submodule,
    /// Sockets, fifos, devices.
    Other,
}

struct Entry<D, F> {
    name: String,
    kind: Kind<D, F>,
}

/// Where a symlink leads.
enum Target<D, F> {
    File(F),
    /// A directory, with its real path relative to PATH.
    Dir(D, String),
    Outside(String),
    Dangling(String),
    Broken(String),
}

/// The entries of one directory of a [`Source`].
type Listing<S> = Vec<Entry<<S as Source>::Dir, <S as Source>::File>>;

/// A tree of files: the disk or a git tree.
trait Source {
    type Dir: Clone;
    type File;
    fn list(&self, dir: &Self::Dir) -> Result<Listing<Self>, String>;
    fn size(&self, file: &Self::File) -> Result<u64, String>;
    /// Reads at most `limit` bytes; `None` if the file is larger.
    fn read(&self, file: &Self::File, limit: u64) -> Result<Option<Vec<u8>>, String>;
    /// Resolves the symlink at `path` (relative to PATH).
    fn resolve(&self, path: &str) -> Target<Self::Dir, Self::File>;
}

fn is_yaml(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml")
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// `.dovetailignore` matchers of the directories being walked, outermost first.
struct IgnoreStack {
    layers: Vec<(String, Gitignore)>,
}

impl IgnoreStack {
    fn ignored(&self, path: &str, is_dir: bool) -> bool {
        for (dir, gi) in self.layers.iter().rev() {
            let rel = if dir.is_empty() {
                path
            } else {
                match path
                    .strip_prefix(dir.as_str())
                    .and_then(|p| p.strip_prefix('/'))
                {
                    Some(rel) => rel,
                    None => continue,
                }
            };
            let m = gi.matched(rel, is_dir);
            if m.is_ignore() {
                return true;
            }
            if m.is_whitelist() {
                return false;
            }
        }
        false
    }
}

struct Walker<'a, S: Source> {
    source: &'a S,
    limits: &'a Limits,
    out: RepoFiles,
    ignores: IgnoreStack,
    /// Real paths (relative to PATH) of the directories being walked, to
    /// detect directory symlink loops.
    chain: Vec<String>,
}

fn walk<S: Source>(source: &S, root: S::Dir, limits: &Limits) -> RepoFiles {
    let mut walker = Walker {
        source,
        limits,
        out: RepoFiles::default(),
        ignores: IgnoreStack { layers: Vec::new() },
        chain: Vec::new(),
    };
    walker.dir(&root, "", String::new());
    let mut out = walker.out;
    out.files.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

impl<S: Source> Walker<'_, S> {
    fn note(&mut self, d: Diagnostic) {
        self.out.diagnostics.push(d);
    }

    fn file_error(&mut self, path: &str, code: &'static str, message: String) {
        self.out.files.push(RepoFile {
            path: path.to_string(),
            content: Err(Diagnostic::error(code, message).in_file(path)),
        });
    }

    /// Walks `dir`, shown as `path` (relative to PATH), whose real location is `real`.
    fn dir(&mut self, dir: &S::Dir, path: &str, real: String) {
        if self.chain.len() >= MAX_DIR_DEPTH {
            self.note(
                Diagnostic::warning(
                    codes::UNREADABLE,
                    format!("directories nested deeper than {MAX_DIR_DEPTH} levels are not read"),
                )
                .in_file(path),
            );
            return;
        }
        let entries = match self.source.list(dir) {
            Ok(entries) => entries,
            Err(e) => {
                self.note(
                    Diagnostic::error(codes::UNREADABLE, format!("cannot read directory: {e}"))
                        .in_file(path),
                );
                return;
            }
        };
        if !path.is_empty() && entries.iter().any(|e| e.name == ".git") {
            self.note(submodule(path));
            return;
        }
        let pushed = self.load_ignore_file(&entries, path);
        self.chain.push(real.clone());
        for entry in entries {
            if entry.name == ".git" {
                continue;
            }
            let child = join(path, &entry.name);
            let child_real = join(&real, &entry.name);
            match entry.kind {
                Kind::Dir(d) => {
                    if !self.ignores.ignored(&child, true) {
                        self.dir(&d, &child, child_real);
                    }
                }
                Kind::File(f) => {
                    if is_yaml(&entry.name) && !self.ignores.ignored(&child, false) {
                        self.file(&f, &child);
                    }
                }
                Kind::Symlink => self.symlink(&entry.name, &child),
                Kind::Submodule => {
                    if !self.ignores.ignored(&child, true) {
                        self.note(submodule(&child));
                    }
                }
                Kind::Other => {
                    if is_yaml(&entry.name) && !self.ignores.ignored(&child, false) {
                        self.file_error(&child, codes::UNREADABLE, "not a regular file".into());
                    }
                }
            }
        }
        self.chain.pop();
        if pushed {
            self.ignores.layers.pop();
        }
    }

    fn symlink(&mut self, name: &str, path: &str) {
        let yaml = is_yaml(name);
        // Ignore rules see the link by its own name; whether it is a
        // directory is only known after resolving it.
        if yaml && self.ignores.ignored(path, false) {
            return;
        }
        match self.source.resolve(path) {
            Target::File(f) => {
                if yaml {
                    self.file(&f, path);
                }
            }
            Target::Dir(d, real) => {
                if self.ignores.ignored(path, true) {
                    return;
                }
                let inside = |a: &String| {
                    real == *a || a.starts_with(&format!("{real}/")) || real.is_empty()
                };
                if self.chain.iter().any(inside) {
                    self.note(
                        Diagnostic::warning(
                            codes::SYMLINK,
                            format!("symlink to `{real}` loops back into a directory being read; not followed"),
                        )
                        .in_file(path),
                    );
                } else {
                    self.dir(&d, path, real);
                }
            }
            Target::Outside(target) => {
                if yaml {
                    self.file_error(
                        path,
                        codes::SYMLINK,
                        format!("symlink to `{target}` points outside the configuration directory; not read"),
                    );
                }
            }
            Target::Dangling(target) => {
                if yaml {
                    self.file_error(
                        path,
                        codes::SYMLINK,
                        format!("dangling symlink: `{target}` does not exist"),
                    );
                }
            }
            Target::Broken(why) => {
                if yaml {
                    self.file_error(path, codes::SYMLINK, why);
                }
            }
        }
    }

    fn file(&mut self, f: &S::File, path: &str) {
        let content = match self.source.size(f) {
            Err(e) => Err(Diagnostic::error(
                codes::UNREADABLE,
                format!("cannot read file: {e}"),
            )),
            Ok(size) if size > self.limits.max_file_bytes => {
                Err(yaml::file_too_large(path, size, self.limits))
            }
            Ok(_) => match self.source.read(f, self.limits.max_file_bytes) {
                Ok(Some(bytes)) => Ok(bytes),
                // It grew between the size check and the read.
                Ok(None) => Err(yaml::file_too_large(
                    path,
                    self.limits.max_file_bytes.saturating_add(1),
                    self.limits,
                )),
                Err(e) => Err(Diagnostic::error(
                    codes::UNREADABLE,
                    format!("cannot read file: {e}"),
                )),
            },
        };
        self.out.files.push(RepoFile {
            path: path.to_string(),
            content: content.map_err(|d| d.in_file(path)),
        });
    }

    /// Pushes the matcher of `dir`'s `.dovetailignore`, if it has one.
    fn load_ignore_file(&mut self, entries: &[Entry<S::Dir, S::File>], dir: &str) -> bool {
        let Some(Kind::File(f)) = entries
            .iter()
            .find(|e| e.name == IGNORE_FILE)
            .map(|e| &e.kind)
        else {
            return false;
        };
        let path = join(dir, IGNORE_FILE);
        let bytes = match self.source.read(f, MAX_IGNORE_FILE_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                self.note(
                    Diagnostic::error(codes::IGNORE_FILE, "ignore file is too large; not used")
                        .in_file(&path),
                );
                return false;
            }
            Err(e) => {
                self.note(
                    Diagnostic::error(codes::IGNORE_FILE, format!("cannot read ignore file: {e}"))
                        .in_file(&path),
                );
                return false;
            }
        };
        let text = String::from_utf8_lossy(&bytes);
        let mut builder = GitignoreBuilder::new(".");
        for (i, line) in text.lines().enumerate() {
            if let Err(e) = builder.add_line(None, line) {
                self.note(
                    Diagnostic::warning(
                        codes::IGNORE_FILE,
                        format!("invalid pattern ignored: {e}"),
                    )
                    .in_file(&path)
                    .at(crate::diag::Pos {
                        line: u32::try_from(i + 1).unwrap_or(u32::MAX),
                        column: 1,
                    }),
                );
            }
        }
        match builder.build() {
            Ok(gi) => {
                self.ignores.layers.push((dir.to_string(), gi));
                true
            }
            Err(e) => {
                self.note(
                    Diagnostic::error(codes::IGNORE_FILE, format!("invalid ignore file: {e}"))
                        .in_file(&path),
                );
                false
            }
        }
    }
}

fn submodule(path: &str) -> Diagnostic {
    Diagnostic::warning(
        codes::SUBMODULE,
        "submodule or nested git repository; its files are not read",
    )
    .in_file(path)
    .with_hint("dovetail reads one repository; move the configuration into it or add the path to .dovetailignore")
}

// ---------------------------------------------------------------------------
// The disk.

struct Disk {
    /// Canonical PATH.
    root: PathBuf,
}

impl Source for Disk {
    type Dir = PathBuf;
    type File = PathBuf;

    fn list(&self, dir: &PathBuf) -> Result<Listing<Self>, String> {
        let mut entries = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| e.to_string())? {
            let entry = entry.map_err(|e| e.to_string())?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let kind = match entry.file_type() {
                Ok(t) if t.is_symlink() => Kind::Symlink,
                Ok(t) if t.is_dir() => Kind::Dir(entry.path()),
                Ok(t) if t.is_file() => Kind::File(entry.path()),
                Ok(_) => Kind::Other,
                Err(_) => Kind::File(entry.path()),
            };
            entries.push(Entry { name, kind });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn size(&self, file: &PathBuf) -> Result<u64, String> {
        fs::metadata(file)
            .map(|m| m.len())
            .map_err(|e| e.to_string())
    }

    fn read(&self, file: &PathBuf, limit: u64) -> Result<Option<Vec<u8>>, String> {
        let f = fs::File::open(file).map_err(|e| e.to_string())?;
        let mut bytes = Vec::new();
        f.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| e.to_string())?;
        Ok((bytes.len() as u64 <= limit).then_some(bytes))
    }

    fn resolve(&self, path: &str) -> Target<PathBuf, PathBuf> {
        let link = self.root.join(path);
        let target = fs::read_link(&link)
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default();
        let real = match fs::canonicalize(&link) {
            Ok(real) => real,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let parent = link.parent().unwrap_or(&self.root);
                return if lexically_inside(&self.root, &parent.join(&target)) {
                    Target::Dangling(target)
                } else {
                    Target::Outside(target)
                };
            }
            Err(e) => return Target::Broken(format!("cannot resolve symlink to `{target}`: {e}")),
        };
        let Ok(rel) = real.strip_prefix(&self.root) else {
            return Target::Outside(target);
        };
        let rel = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        match fs::metadata(&real) {
            Ok(m) if m.is_dir() => Target::Dir(real, rel),
            Ok(m) if m.is_file() => Target::File(real),
            Ok(_) => Target::Broken(format!("symlink to `{target}` is not a regular file")),
            Err(e) => Target::Broken(format!("cannot resolve symlink to `{target}`: {e}")),
        }
    }
}

/// Whether `path`, with `.` and `..` applied textually, is inside `root`.
fn lexically_inside(root: &Path, path: &Path) -> bool {
    use std::path::Component;
    let mut normal = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            c => normal.push(c),
        }
    }
    normal.starts_with(root)
}

// ---------------------------------------------------------------------------
// A git tree.

const MODE_LINK: i32 = 0o120_000;
const MODE_COMMIT: i32 = 0o160_000;

struct GitTree<'r> {
    repo: &'r Repository,
    /// The tree at PATH.
    root: Oid,
}

impl GitTree<'_> {
    fn blob(&self, oid: Oid) -> Result<Vec<u8>, String> {
        let blob = self
            .repo
            .find_blob(oid)
            .map_err(|e| e.message().to_string())?;
        Ok(blob.content().to_vec())
    }

    /// The entry at `parts` below the root: (is a tree, id, mode).
    fn lookup(&self, parts: &[String]) -> Result<Option<(Oid, i32, Option<ObjectType>)>, String> {
        if parts.is_empty() {
            return Ok(Some((self.root, 0o040_000, Some(ObjectType::Tree))));
        }
        let tree = self
            .repo
            .find_tree(self.root)
            .map_err(|e| e.message().to_string())?;
        match tree.get_path(Path::new(&parts.join("/"))) {
            Ok(entry) => Ok(Some((entry.id(), entry.filemode(), entry.kind()))),
            Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e.message().to_string()),
        }
    }
}

impl Source for GitTree<'_> {
    type Dir = Oid;
    type File = Oid;

    fn list(&self, dir: &Oid) -> Result<Listing<Self>, String> {
        let tree = self
            .repo
            .find_tree(*dir)
            .map_err(|e| e.message().to_string())?;
        // Git keeps tree entries sorted (directories as if suffixed with '/').
        Ok(tree
            .iter()
            .map(|e| {
                let name = String::from_utf8_lossy(e.name_bytes()).into_owned();
                let kind = match (e.kind(), e.filemode()) {
                    (_, MODE_COMMIT) | (Some(ObjectType::Commit), _) => Kind::Submodule,
                    (_, MODE_LINK) => Kind::Symlink,
                    (Some(ObjectType::Tree), _) => Kind::Dir(e.id()),
                    (Some(ObjectType::Blob), _) => Kind::File(e.id()),
                    _ => Kind::Other,
                };
                Entry { name, kind }
            })
            .collect())
    }

    fn size(&self, file: &Oid) -> Result<u64, String> {
        let odb = self.repo.odb().map_err(|e| e.message().to_string())?;
        let (size, _) = odb
            .read_header(*file)
            .map_err(|e| e.message().to_string())?;
        Ok(size as u64)
    }

    fn read(&self, file: &Oid, limit: u64) -> Result<Option<Vec<u8>>, String> {
        if self.size(file)? > limit {
            return Ok(None);
        }
        self.blob(*file).map(Some)
    }

    fn resolve(&self, path: &str) -> Target<Oid, Oid> {
        match self.resolve_in_tree(path) {
            Ok(target) => target,
            Err(e) => Target::Broken(format!("cannot resolve symlink: {e}")),
        }
    }
}

impl GitTree<'_> {
    /// Resolves a symlink lexically inside the tree, following symlinks met
    /// on the way.
    fn resolve_in_tree(&self, path: &str) -> Result<Target<Oid, Oid>, String> {
        let mut parts: Vec<String> = path.split('/').map(str::to_string).collect();
        let Some((link, _, _)) = self.lookup(&parts)? else {
            return Ok(Target::Dangling(path.to_string()));
        };
        parts.pop();
        let target = String::from_utf8_lossy(&self.blob(link)?).into_owned();
        // Components still to walk, the next one last.
        let mut todo: Vec<String> = Vec::new();
        if !push_components(&mut todo, &target) {
            return Ok(Target::Outside(target));
        }
        let mut hops = 0;
        while let Some(component) = todo.pop() {
            if component == ".." {
                if parts.pop().is_none() {
                    return Ok(Target::Outside(target));
                }
                continue;
            }
            parts.push(component);
            let Some((oid, mode, kind)) = self.lookup(&parts)? else {
                return Ok(Target::Dangling(target));
            };
            if mode == MODE_LINK {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Ok(Target::Broken(format!(
                        "too many levels of symlinks resolving `{target}`"
                    )));
                }
                parts.pop();
                let next = String::from_utf8_lossy(&self.blob(oid)?).into_owned();
                if !push_components(&mut todo, &next) {
                    return Ok(Target::Outside(target));
                }
            } else if !todo.is_empty() && kind != Some(ObjectType::Tree) {
                return Ok(Target::Dangling(target));
            }
        }
        match self.lookup(&parts)? {
            Some((oid, _, Some(ObjectType::Tree))) => Ok(Target::Dir(oid, parts.join("/"))),
            Some((oid, _, Some(ObjectType::Blob))) => Ok(Target::File(oid)),
            Some(_) => Ok(Target::Broken(format!(
                "symlink to `{target}` leads to a submodule"
            ))),
            None => Ok(Target::Dangling(target)),
        }
    }
}

/// Pushes the components of a symlink target so that the first is popped
/// first; `false` for an absolute target (outside the tree by definition).
fn push_components(todo: &mut Vec<String>, target: &str) -> bool {
    if target.starts_with('/') {
        return false;
    }
    todo.extend(
        target
            .rsplit('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::to_string),
    );
    true
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use git2::{IndexAddOption, RepositoryInitOptions, Signature};
    use std::os::unix::fs::symlink;

    pub(crate) fn write(root: &Path, path: &str, content: &str) {
        let p = root.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    pub(crate) fn init(root: &Path) -> Repository {
        let mut opts = RepositoryInitOptions::new();
        opts.initial_head("main");
        Repository::init_opts(root, &opts).unwrap()
    }

    /// Stages everything on disk and commits it on HEAD.
    pub(crate) fn commit_all(repo: &Repository, message: &str) -> Oid {
        let mut index = repo.index().unwrap();
        index
            .add_all(["*"], IndexAddOption::DEFAULT | IndexAddOption::FORCE, None)
            .unwrap();
        index.update_all(["*"], None).unwrap();
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = Signature::now("t", "t@example.com").unwrap();
        let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let parents: Vec<_> = parent.iter().collect();
        repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)
            .unwrap()
    }

    fn listed(files: &RepoFiles) -> Vec<(&str, Result<String, String>)> {
        files
            .files
            .iter()
            .map(|f| {
                let content = match &f.content {
                    Ok(b) => Ok(String::from_utf8_lossy(b).into_owned()),
                    Err(d) => Err(d.message.clone()),
                };
                (f.path.as_str(), content)
            })
            .collect()
    }

    fn names(files: &RepoFiles) -> Vec<&str> {
        files.files.iter().map(|f| f.path.as_str()).collect()
    }

    fn head() -> Revision {
        Revision::default()
    }

    #[test]
    fn plain_directory_reads_yaml_recursively_sorted_and_ignores() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "b.yaml", "b");
        write(root, "a.yml", "a");
        write(root, "notes.txt", "x");
        write(root, "pools/z.yaml", "z");
        write(root, "pools/skip.yaml", "s");
        write(root, "pools/.dovetailignore", "skip.yaml\n");
        write(root, "drafts/d.yaml", "d");
        write(root, "tmp/keep.yaml", "k");
        write(root, "tmp/other.yaml", "o");
        write(
            root,
            ".dovetailignore",
            "# comment\ndrafts/\ntmp/*\n!tmp/keep.yaml\n",
        );
        write(root, ".git/config.yaml", "not a repo, but never read");
        let files = read_files(root, &head(), false).unwrap();
        assert_eq!(
            names(&files),
            vec!["a.yml", "b.yaml", "pools/z.yaml", "tmp/keep.yaml"]
        );
        assert_eq!(files.files[0].content.as_deref().unwrap(), b"a");
        assert!(files.diagnostics.is_empty(), "{:?}", files.diagnostics);
        assert_eq!(files.commit, None);
    }

    #[test]
    fn plain_directory_with_explicit_ref_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_files(dir.path(), &Revision::Ref("main".into()), true).unwrap_err();
        assert!(
            matches!(err, SourceError::RefWithoutRepository { .. }),
            "{err}"
        );
        assert!(err.hint().unwrap().contains("omit --ref"));
    }

    #[test]
    fn missing_path_and_file_path_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_files(&dir.path().join("nope"), &head(), false).unwrap_err();
        assert!(matches!(err, SourceError::PathNotFound { .. }));
        assert!(err.to_string().contains("does not exist"));
        write(dir.path(), "f.yaml", "x");
        let err = read_files(&dir.path().join("f.yaml"), &head(), false).unwrap_err();
        assert!(matches!(err, SourceError::NotADirectory { .. }));
    }

    #[test]
    fn git_reads_head_branches_and_ancestors() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let repo = init(root);
        write(root, "a.yaml", "v1");
        let first = commit_all(&repo, "one");
        write(root, "a.yaml", "v2");
        write(root, "b.yaml", "b");
        let second = commit_all(&repo, "two");
        write(root, "uncommitted.yaml", "u");
        write(root, "a.yaml", "dirty");

        let files = read_files(root, &head(), false).unwrap();
        assert_eq!(
            listed(&files),
            vec![("a.yaml", Ok("v2".into())), ("b.yaml", Ok("b".into()))]
        );
        let commit = files.commit.unwrap();
        assert_eq!(commit.sha, second.to_string());
        assert_eq!(commit.branch.as_deref(), Some("main"));

        let files = read_files(root, &Revision::Ref("HEAD~1".into()), true).unwrap();
        assert_eq!(listed(&files), vec![("a.yaml", Ok("v1".into()))]);
        assert_eq!(files.commit.unwrap().branch, None);

        let files = read_files(root, &Revision::Ref("main".into()), true).unwrap();
        assert_eq!(files.commit.unwrap().branch.as_deref(), Some("main"));

        let files = read_files(root, &Revision::Worktree, false).unwrap();
        assert_eq!(
            listed(&files),
            vec![
                ("a.yaml", Ok("dirty".into())),
                ("b.yaml", Ok("b".into())),
                ("uncommitted.yaml", Ok("u".into()))
            ]
        );

        let info = resolve_commit(root, &Revision::Ref(first.to_string())).unwrap();
        assert_eq!(info.sha, first.to_string());

        // One open repository reads two revisions.
        let opened = Repo::open(root).unwrap().unwrap();
        let old = opened.files_at("HEAD~1", &Limits::default()).unwrap();
        let new = opened.files_at("HEAD", &Limits::default()).unwrap();
        assert_eq!((old.files.len(), new.files.len()), (1, 2));
    }

    #[test]
    fn missing_ref_names_it_and_suggests_close_branches() {
        let dir = tempfile::tempdir().unwrap();
        let repo = init(dir.path());
        write(dir.path(), "a.yaml", "a");
        commit_all(&repo, "one");
        let err = read_files(dir.path(), &Revision::Ref("mian".into()), true).unwrap_err();
        assert_eq!(err.to_string(), "ref `mian` does not exist");
        assert!(
            err.hint().unwrap().contains("did you mean `main`?"),
            "{:?}",
            err.hint()
        );
        let err = read_files(dir.path(), &Revision::Ref("zzzzzzzz".into()), true).unwrap_err();
        assert!(err.hint().unwrap().contains("--worktree"));
        let err = read_files(dir.path(), &Revision::Ref("HEAD~5".into()), true).unwrap_err();
        assert_eq!(err.metric_label(), "ref_not_found");
    }

    #[test]
    fn repository_without_commits_hints_at_worktree() {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path());
        let err = read_files(dir.path(), &head(), false).unwrap_err();
        assert!(
            matches!(err, SourceError::RefNotFound { unborn: true, .. }),
            "{err:?}"
        );
        assert!(err.hint().unwrap().contains("no commit yet"));
    }

    #[test]
    fn dovetailignore_is_read_from_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let repo = init(root);
        write(root, ".dovetailignore", "ignored.yaml\n");
        write(root, "ignored.yaml", "i");
        write(root, "kept.yaml", "k");
        write(root, "sub/.dovetailignore", "*.yml\n");
        write(root, "sub/x.yml", "x");
        write(root, "sub/y.yaml", "y");
        commit_all(&repo, "one");
        // The worktree's ignore file differs from the committed one.
        write(root, ".dovetailignore", "kept.yaml\n");
        let files = read_files(root, &head(), false).unwrap();
        assert_eq!(names(&files), vec!["kept.yaml", "sub/y.yaml"]);
        let files = read_files(root, &Revision::Worktree, false).unwrap();
        assert_eq!(names(&files), vec!["ignored.yaml", "sub/y.yaml"]);
    }

    #[test]
    fn subdirectory_of_a_repository_reads_that_subtree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let repo = init(root);
        write(root, "top.yaml", "t");
        write(root, "config/pools/a.yaml", "a");
        write(root, "config/b.yaml", "b");
        commit_all(&repo, "one");
        write(root, "config/new.yaml", "n");
        write(root, "fresh/x.yaml", "x");
        let sub = root.join("config");
        let files = read_files(&sub, &head(), false).unwrap();
        assert_eq!(names(&files), vec!["b.yaml", "pools/a.yaml"]);
        assert!(files.commit.is_some());
        let files = read_files(&sub, &Revision::Worktree, false).unwrap();
        assert_eq!(names(&files), vec!["b.yaml", "new.yaml", "pools/a.yaml"]);
        let err = read_files(&root.join("fresh"), &head(), false).unwrap_err();
        assert!(
            matches!(err, SourceError::PathNotInRevision { .. }),
            "{err}"
        );
        assert!(err.hint().unwrap().contains("--worktree"));
    }

    /// Lays out symlinks inside, outside, dangling and looping.
    fn symlink_layout(root: &Path, outside: &Path) {
        write(outside, "secret.yaml", "secret");
        write(root, "real/inner.yaml", "inner");
        write(root, "good.yaml", "good");
        symlink("real/inner.yaml", root.join("inside.yaml")).unwrap();
        symlink(outside.join("secret.yaml"), root.join("outside.yaml")).unwrap();
        symlink("../../outside-relative.yaml", root.join("real/escape.yaml")).unwrap();
        symlink("missing.yaml", root.join("dangling.yaml")).unwrap();
        symlink("real", root.join("linked-dir")).unwrap();
        symlink("..", root.join("real/loop")).unwrap();
    }

    fn check_symlinks(files: &RepoFiles) {
        let listed = listed(files);
        let get = |p: &str| listed.iter().find(|(n, _)| *n == p).map(|(_, c)| c.clone());
        assert_eq!(get("good.yaml"), Some(Ok("good".into())));
        assert_eq!(get("inside.yaml"), Some(Ok("inner".into())));
        assert_eq!(get("real/inner.yaml"), Some(Ok("inner".into())));
        assert_eq!(get("linked-dir/inner.yaml"), Some(Ok("inner".into())));
        let outside = get("outside.yaml").unwrap().unwrap_err();
        assert!(outside.contains("points outside"), "{outside}");
        let escape = get("real/escape.yaml").unwrap().unwrap_err();
        assert!(escape.contains("points outside"), "{escape}");
        let dangling = get("dangling.yaml").unwrap().unwrap_err();
        assert!(dangling.contains("dangling symlink"), "{dangling}");
        // `real/loop` -> `..` is reported, not followed forever.
        assert!(
            files
                .diagnostics
                .iter()
                .any(|d| d.code == codes::SYMLINK && d.message.contains("loops")),
            "{:?}",
            files.diagnostics
        );
        for f in &files.files {
            if let Err(d) = &f.content {
                assert_eq!(d.file, f.path);
            }
        }
    }

    #[test]
    fn symlinks_on_disk() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        symlink_layout(dir.path(), outside.path());
        let files = read_files(dir.path(), &head(), false).unwrap();
        check_symlinks(&files);
    }

    #[test]
    fn symlinks_in_a_git_tree() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let repo = init(dir.path());
        symlink_layout(dir.path(), outside.path());
        commit_all(&repo, "links");
        // Remove the files on disk: the tree must be read, not the disk.
        fs::remove_dir_all(dir.path().join("real")).unwrap();
        let files = read_files(dir.path(), &head(), false).unwrap();
        check_symlinks(&files);
    }

    #[test]
    fn symlink_chains_resolve_in_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let repo = init(dir.path());
        write(dir.path(), "a/b/target.yaml", "t");
        symlink("a/b", dir.path().join("ab")).unwrap();
        symlink("ab/target.yaml", dir.path().join("via.yaml")).unwrap();
        symlink("self1.yaml", dir.path().join("self2.yaml")).unwrap();
        symlink("self2.yaml", dir.path().join("self1.yaml")).unwrap();
        commit_all(&repo, "chains");
        let files = read_files(dir.path(), &head(), false).unwrap();
        let listed = listed(&files);
        let get = |p: &str| listed.iter().find(|(n, _)| *n == p).map(|(_, c)| c.clone());
        assert_eq!(get("via.yaml"), Some(Ok("t".into())));
        assert!(
            get("self1.yaml")
                .unwrap()
                .unwrap_err()
                .contains("too many levels")
        );
    }

    #[test]
    fn oversized_files_are_reported_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let repo = init(dir.path());
        write(dir.path(), "big.yaml", &"x".repeat(2000));
        write(dir.path(), "small.yaml", "s");
        commit_all(&repo, "sizes");
        let limits = Limits {
            max_file_bytes: 1000,
            ..Limits::default()
        };
        for rev in [head(), Revision::Worktree] {
            let files = read_files_with_limits(dir.path(), &rev, false, &limits).unwrap();
            let listed = listed(&files);
            assert_eq!(listed[1], ("small.yaml", Ok("s".into())));
            let err = listed[0].1.clone().unwrap_err();
            assert!(err.contains("2000 bytes"), "{err}");
        }
    }

    #[test]
    fn submodules_are_reported_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let repo = init(root);
        write(root, "a.yaml", "a");
        let base = commit_all(&repo, "one");
        // Add a gitlink entry to the tree by hand.
        let head_tree = repo.find_commit(base).unwrap().tree().unwrap();
        let mut builder = repo.treebuilder(Some(&head_tree)).unwrap();
        builder.insert("vendored", base, 0o160_000).unwrap();
        let tree = repo.find_tree(builder.write().unwrap()).unwrap();
        let sig = Signature::now("t", "t@example.com").unwrap();
        let parent = repo.find_commit(base).unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "sub", &tree, &[&parent])
            .unwrap();
        let files = read_files(root, &head(), false).unwrap();
        assert_eq!(names(&files), vec!["a.yaml"]);
        assert_eq!(files.diagnostics.len(), 1);
        assert_eq!(files.diagnostics[0].code, codes::SUBMODULE);
        assert_eq!(files.diagnostics[0].file, "vendored");

        // On disk, a nested repository is skipped the same way.
        write(root, "nested/.git/HEAD", "ref: refs/heads/main\n");
        write(root, "nested/n.yaml", "n");
        let files = read_files(root, &Revision::Worktree, false).unwrap();
        assert_eq!(names(&files), vec!["a.yaml"]);
        assert_eq!(files.diagnostics[0].file, "nested");
    }
}
