//! Writing files without following symlinks.
//!
//! Every file dovetail writes (a snapshot, the CRDs, the `commit` steps of a
//! simulation) goes through here, so that a symlink planted where a file is
//! expected (for example in a pull request: `crds/nodepools.yaml ->
//! ~/.bashrc`) can never redirect a write outside its target:
//! - a symlink at the file itself is refused, never followed or replaced;
//! - the content goes to a temporary file in the same directory, renamed
//!   over the target (a rename replaces a directory entry, it does not follow
//!   it), so a failed write leaves the old file whole;
//! - [`write_inside`] and [`remove_inside`] also refuse a symlink at any
//!   directory between a root and the file.

use std::io::Write;
use std::path::{Component, Path, PathBuf};

/// Why a write was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{path} is a symlink; dovetail never writes through a symlink")]
    Symlink { path: PathBuf },
    #[error("{path} is a directory, not a file")]
    Directory { path: PathBuf },
    #[error("{path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error("{path} is not a path inside {root}")]
    Outside { path: PathBuf, root: PathBuf },
    #[error("{path} does not exist")]
    Missing { path: PathBuf },
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WriteError + '_ {
    move |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What is at `path`, without following a symlink there.
fn kind(path: &Path) -> Result<Option<std::fs::FileType>, WriteError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m.file_type())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

/// Whether [`write_file`] may write `path`: not a symlink, not a
/// directory. For a command to refuse a path before long work.
pub fn check_target(path: &Path) -> Result<(), WriteError> {
    match kind(path)? {
        Some(k) if k.is_symlink() => Err(WriteError::Symlink {
            path: path.to_path_buf(),
        }),
        Some(k) if k.is_dir() => Err(WriteError::Directory {
            path: path.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

/// Writes `bytes` to `path`, replacing a regular file atomically. A symlink
/// or a directory at `path` is an error; the directories above it are the
/// caller's choice and are used as they are.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_file_with(path, |w| w.write_all(bytes))
}

/// [`write_file`] with the content streamed by `write` (buffered).
pub fn write_file_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), WriteError> {
    check_target(path)?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".dovetail-")
        .tempfile_in(parent)
        .map_err(io(path))?;
    {
        let mut buffered = std::io::BufWriter::new(tmp.as_file_mut());
        write(&mut buffered).map_err(io(path))?;
        buffered.flush().map_err(io(path))?;
    }
    tmp.flush().map_err(io(path))?;
    set_readable(tmp.as_file()).map_err(io(path))?;
    tmp.persist(path).map_err(|e| io(path)(e.error))?;
    Ok(())
}

/// Temporary files are private (0600); a written file gets the usual 0644.
#[cfg(unix)]
fn set_readable(f: &std::fs::File) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))
}

#[cfg(not(unix))]
fn set_readable(_: &std::fs::File) -> std::io::Result<()> {
    Ok(())
}

/// The directories between `root` and `rel`'s file, each checked not to be
/// a symlink; `rel` must be relative, without `..`.
fn walk_inside(root: &Path, rel: &Path, create: bool) -> Result<PathBuf, WriteError> {
    let outside = || WriteError::Outside {
        path: rel.to_path_buf(),
        root: root.to_path_buf(),
    };
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(p) => Ok(p),
            _ => Err(outside()),
        })
        .collect::<Result<_, _>>()?;
    let Some((file, dirs)) = parts.split_last() else {
        return Err(outside());
    };
    let mut dir = root.to_path_buf();
    for d in dirs {
        dir.push(d);
        match kind(&dir)? {
            Some(k) if k.is_symlink() => return Err(WriteError::Symlink { path: dir }),
            Some(k) if k.is_dir() => {}
            Some(_) => return Err(WriteError::NotADirectory { path: dir }),
            None if create => std::fs::create_dir(&dir).map_err(io(&dir))?,
            None => return Err(WriteError::Missing { path: dir }),
        }
    }
    dir.push(file);
    Ok(dir)
}

/// Writes `root/rel`, creating the directories between; a symlink anywhere
/// below `root` on the way is refused.
pub fn write_inside(root: &Path, rel: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let path = walk_inside(root, rel, true)?;
    write_file(&path, bytes)
}

/// Removes the file `root/rel`; a symlink at a directory on the way is
/// refused (a symlink at `rel` itself is removed, not followed).
pub fn remove_inside(root: &Path, rel: &Path) -> Result<(), WriteError> {
    let path = walk_inside(root, rel, false)?;
    match kind(&path)? {
        None => Err(WriteError::Missing { path }),
        Some(k) if k.is_dir() => Err(WriteError::Directory { path }),
        Some(_) => std::fs::remove_file(&path).map_err(io(&path)),
    }
}

/// Writes `files` (name, content) into `dir`, creating it if needed. Nothing
/// is written through a symlink: not at `dir` itself, nor at a file in it.
pub fn write_files_into(dir: &Path, files: Vec<(String, String)>) -> Result<(), WriteError> {
    if kind(dir)?.is_some_and(|k| k.is_symlink()) {
        return Err(WriteError::Symlink {
            path: dir.to_path_buf(),
        });
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    for (name, content) in files {
        write_file(&dir.join(name), content.as_bytes())?;
    }
    Ok(())
}

/// The first directory between `root` and `rel`'s file that is a symlink
/// or not a directory, for checks made before anything is written.
pub fn blocked_inside(root: &Path, rel: &Path) -> Option<WriteError> {
    let mut dir = root.to_path_buf();
    let parts: Vec<Component> = rel.components().collect();
    let (_, dirs) = parts.split_last()?;
    for c in dirs {
        dir.push(c);
        match kind(&dir) {
            Ok(Some(k)) if k.is_symlink() => return Some(WriteError::Symlink { path: dir }),
            Ok(Some(k)) if !k.is_dir() => return Some(WriteError::NotADirectory { path: dir }),
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(e) => return Some(e),
        }
    }
    None
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_symlinked_file_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.txt");
        std::fs::write(&target, "precious").unwrap();
        let link = dir.path().join("out.yaml");
        symlink(&target, &link).unwrap();
        let err = write_file(&link, b"overwritten").unwrap_err();
        assert!(matches!(err, WriteError::Symlink { .. }), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    }

    #[test]
    fn a_regular_file_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("out.yaml");
        std::fs::write(&f, "old content that is longer").unwrap();
        write_file(&f, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "new");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn writes_inside_a_root_never_pass_a_symlinked_directory() {
        let outside = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        symlink(outside.path(), root.path().join("linkdir")).unwrap();
        symlink("..", root.path().join("up")).unwrap();
        for rel in ["linkdir/w.yaml", "up/w.yaml", "linkdir/deeper/w.yaml"] {
            let err = write_inside(root.path(), Path::new(rel), b"x").unwrap_err();
            assert!(matches!(err, WriteError::Symlink { .. }), "{rel}: {err}");
            assert!(
                blocked_inside(root.path(), Path::new(rel)).is_some(),
                "{rel}"
            );
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        let parent = root.path().parent().unwrap();
        assert!(!parent.join("w.yaml").exists());
        std::fs::write(outside.path().join("victim.yaml"), "v").unwrap();
        let err = remove_inside(root.path(), Path::new("linkdir/victim.yaml")).unwrap_err();
        assert!(matches!(err, WriteError::Symlink { .. }), "{err}");
        assert!(outside.path().join("victim.yaml").exists());
        write_inside(root.path(), Path::new("pools/new/a.yaml"), b"a").unwrap();
        assert_eq!(
            std::fs::read_to_string(root.path().join("pools/new/a.yaml")).unwrap(),
            "a"
        );
        for rel in ["../x.yaml", "/etc/x.yaml", ""] {
            assert!(
                write_inside(root.path(), Path::new(rel), b"x").is_err(),
                "{rel}"
            );
        }
    }
}
