//! Loading the configuration: read the files of a revision (see
//! [`crate::config::source`]) and parse them (see [`crate::config::yaml`]),
//! in parallel across files. Output order does not depend on scheduling:
//! files are sorted by path, documents stay in file order, and diagnostics
//! are sorted by file and position.

use std::path::Path;

use crate::config::source::{self, CommitInfo, RepoFile, RepoFiles, Revision, SourceError};
use crate::config::yaml::{self, Limits, YamlDoc};
use crate::diag::Diagnostic;

/// The parsed documents of one file.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedFile {
    /// Relative to PATH, with `/` separators.
    pub path: String,
    /// In file order; empty if the file could not be read or parsed at all.
    pub docs: Vec<YamlDoc>,
}

/// Everything read from one revision of the configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Loaded {
    /// Sorted by path; every YAML file read, including those with problems.
    pub files: Vec<LoadedFile>,
    /// Problems reading and parsing, sorted by file and position.
    pub diagnostics: Vec<Diagnostic>,
    /// The commit read, when a git tree was read.
    pub commit: Option<CommitInfo>,
}

/// Reads and parses the configuration files of `rev` under `root`. See
/// [`source::read_files`] for which files are read.
pub fn load(
    root: &Path,
    rev: &Revision,
    explicit_ref: bool,
    limits: &Limits,
) -> Result<Loaded, SourceError> {
    let files = source::read_files_with_limits(root, rev, explicit_ref, limits)?;
    Ok(parse_files(files, limits))
}

/// Parses files already read, e.g. from [`source::Repo::files_at`] when
/// comparing two revisions.
pub fn parse_files(files: RepoFiles, limits: &Limits) -> Loaded {
    let RepoFiles {
        files,
        mut diagnostics,
        commit,
    } = files;
    let parsed = parse_parallel(&files, limits);
    let mut loaded = Vec::with_capacity(files.len());
    for (file, parsed) in files.into_iter().zip(parsed) {
        let docs = match (file.content, parsed) {
            (Err(d), _) => {
                diagnostics.push(d);
                Vec::new()
            }
            (Ok(_), Some(parsed)) => {
                diagnostics.extend(parsed.diagnostics);
                parsed.docs
            }
            (Ok(_), None) => Vec::new(),
        };
        loaded.push(LoadedFile {
            path: file.path,
            docs,
        });
    }
    sort_diagnostics(&mut diagnostics);
    Loaded {
        files: loaded,
        diagnostics,
        commit,
    }
}

/// Parses one in-memory file, e.g. a test fixture or `plan --pods`.
pub fn parse_one(path: &str, bytes: &[u8], limits: &Limits) -> Loaded {
    let parsed = yaml::parse_documents(path, bytes, limits);
    let mut diagnostics = parsed.diagnostics;
    sort_diagnostics(&mut diagnostics);
    Loaded {
        files: vec![LoadedFile {
            path: path.to_string(),
            docs: parsed.docs,
        }],
        diagnostics,
        commit: None,
    }
}

fn sort_diagnostics(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
}

/// Parses the readable files, one slot per input file (`None` for files that
/// could not be read), spreading files over the available cores.
fn parse_parallel(files: &[RepoFile], limits: &Limits) -> Vec<Option<yaml::ParsedFile>> {
    crate::par::map(files, |file| {
        file.content
            .as_ref()
            .ok()
            .map(|bytes| yaml::parse_documents(&file.path, bytes, limits))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::source::tests::{commit_all, init, write};
    use crate::config::yaml::codes;
    use std::collections::BTreeMap;

    const GOOD: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  limits:\n    cpu: 100\n";

    /// A repository with one file for every kind of garbage, and good files.
    fn garbage_repo(root: &Path, outside: &Path) {
        write(root, "good.yaml", GOOD);
        write(root, "nested/also-good.yml", "a: 1\n---\nb: 2\n");
        fs_write(root, "binary.yaml", b"\x7fELF\x02\x01\x01\x00\x00\x00");
        fs_write(root, "latin1.yaml", b"name: caf\xe9\n");
        write(root, "huge.yaml", &"a: b\n".repeat(10 * 1024 * 1024));
        write(root, "deep.yaml", &"[".repeat(100_000));
        let mut laughs =
            String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..10 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            laughs.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        write(root, "laughs.yaml", &laughs);
        write(root, "many.yaml", &"a: 1\n---\n".repeat(10_001));
        write(root, "broken.yaml", "a: [1, 2\n");
        write(root, "dup.yaml", "a: 1\na: 2\n");
        write(outside, "secret.yaml", "password: hunter2\n");
        std::os::unix::fs::symlink(outside.join("secret.yaml"), root.join("outside.yaml")).unwrap();
        std::os::unix::fs::symlink("good.yaml", root.join("inside.yaml")).unwrap();
    }

    fn fs_write(root: &Path, path: &str, bytes: &[u8]) {
        std::fs::write(root.join(path), bytes).unwrap();
    }

    fn check_garbage(loaded: &Loaded) {
        let paths: Vec<_> = loaded.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "binary.yaml",
                "broken.yaml",
                "deep.yaml",
                "dup.yaml",
                "good.yaml",
                "huge.yaml",
                "inside.yaml",
                "latin1.yaml",
                "laughs.yaml",
                "many.yaml",
                "nested/also-good.yml",
                "outside.yaml",
            ]
        );
        let docs: BTreeMap<_, _> = loaded
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.docs.len()))
            .collect();
        assert_eq!(docs["good.yaml"], 1);
        assert_eq!(docs["inside.yaml"], 1);
        assert_eq!(docs["nested/also-good.yml"], 2);
        assert_eq!(docs["dup.yaml"], 1);
        assert_eq!(docs["many.yaml"], 10_000);
        for bad in [
            "binary.yaml",
            "broken.yaml",
            "deep.yaml",
            "huge.yaml",
            "latin1.yaml",
            "laughs.yaml",
            "outside.yaml",
        ] {
            assert_eq!(docs[bad], 0, "{bad}");
        }
        let by_file: BTreeMap<_, Vec<_>> =
            loaded.diagnostics.iter().fold(BTreeMap::new(), |mut m, d| {
                m.entry(d.file.as_str())
                    .or_insert_with(Vec::new)
                    .push(d.code);
                m
            });
        let expected: BTreeMap<&str, Vec<&str>> = [
            ("binary.yaml", vec![codes::NOT_TEXT]),
            ("broken.yaml", vec![codes::SYNTAX]),
            ("deep.yaml", vec![codes::LIMIT]),
            ("dup.yaml", vec![codes::DUPLICATE_KEY]),
            ("huge.yaml", vec![codes::FILE_TOO_LARGE]),
            ("latin1.yaml", vec![codes::INVALID_UTF8]),
            ("laughs.yaml", vec![codes::LIMIT]),
            ("many.yaml", vec![codes::LIMIT]),
            ("outside.yaml", vec![source::codes::SYMLINK]),
        ]
        .into_iter()
        .collect();
        assert_eq!(by_file, expected, "{:#?}", loaded.diagnostics);
        for d in &loaded.diagnostics {
            assert!(!d.message.is_empty());
        }
        let good = &loaded
            .files
            .iter()
            .find(|f| f.path == "good.yaml")
            .unwrap()
            .docs[0];
        assert_eq!(
            good.root.get("kind").and_then(|k| k.as_str()),
            Some("NodePool")
        );
    }

    #[test]
    fn garbage_files_are_reported_and_the_others_still_parse_on_disk() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        garbage_repo(dir.path(), outside.path());
        let loaded = load(dir.path(), &Revision::default(), false, &Limits::default()).unwrap();
        check_garbage(&loaded);
        assert_eq!(loaded.commit, None);
    }

    #[test]
    fn garbage_files_are_reported_and_the_others_still_parse_in_git() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let repo = init(dir.path());
        garbage_repo(dir.path(), outside.path());
        commit_all(&repo, "garbage");
        let loaded = load(dir.path(), &Revision::default(), false, &Limits::default()).unwrap();
        check_garbage(&loaded);
        assert!(loaded.commit.is_some());
    }

    #[test]
    fn output_is_sorted_and_deterministic() {
        let dir = tempfile::tempdir().unwrap();
        for i in (0..300).rev() {
            write(
                dir.path(),
                &format!("d{}/f{i:03}.yaml", i % 7),
                &format!("a: {i}\nb: {i}\nb: x\n---\nc: {i}\n"),
            );
        }
        let first = load(dir.path(), &Revision::Worktree, false, &Limits::default()).unwrap();
        let second = load(dir.path(), &Revision::Worktree, false, &Limits::default()).unwrap();
        assert_eq!(first, second);
        assert_eq!(first.files.len(), 300);
        assert!(first.files.windows(2).all(|w| w[0].path < w[1].path));
        assert!(
            first
                .files
                .iter()
                .all(|f| f.docs.len() == 2 && f.docs[1].index == 1)
        );
        assert_eq!(first.diagnostics.len(), 300);
        assert!(
            first
                .diagnostics
                .windows(2)
                .all(|w| w[0].sort_key() <= w[1].sort_key())
        );
    }

    #[test]
    fn parse_one_reads_in_memory_files() {
        let loaded = parse_one(
            "pods.yaml",
            b"kind: Pod\n---\nkind: Pod\nkind: x\n",
            &Limits::default(),
        );
        assert_eq!(loaded.files.len(), 1);
        assert_eq!(loaded.files[0].docs.len(), 2);
        assert_eq!(loaded.diagnostics.len(), 1);
        assert_eq!(loaded.diagnostics[0].file, "pods.yaml");
        assert_eq!(loaded.diagnostics[0].line, 4);
    }

    #[test]
    fn source_errors_pass_through() {
        let dir = tempfile::tempdir().unwrap();
        let err = load(
            &dir.path().join("missing"),
            &Revision::default(),
            false,
            &Limits::default(),
        )
        .unwrap_err();
        assert_eq!(err.metric_label(), "path_not_found");
    }
}
