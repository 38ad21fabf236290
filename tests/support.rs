//! Helpers shared by the suites.

use std::path::{Path, PathBuf};

/// What a command printed and returned.
#[derive(Debug)]
pub struct Output {
    pub code: u8,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `dovetail ARGS` in-process, capturing both streams.
pub fn dovetail(args: &[&str]) -> Output {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = {
        let mut io = dovetail::cli::Io {
            out: &mut out,
            err: &mut err,
            out_is_terminal: false,
            err_is_terminal: false,
        };
        let argv = std::iter::once("dovetail").chain(args.iter().copied());
        dovetail::cli::run_args(argv, &mut io)
    };
    Output {
        code,
        stdout: String::from_utf8(out).expect("stdout is UTF-8"),
        stderr: String::from_utf8(err).expect("stderr is UTF-8"),
    }
}

/// The crate root; integration tests run with it as the working directory.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compares `actual` with the file at `path` (relative to the crate root);
/// with `DOVETAIL_BLESS=1` set, rewrites the file instead.
pub fn assert_matches_file(actual: &str, path: &Path) {
    let full = root().join(path);
    if std::env::var_os("DOVETAIL_BLESS").is_some() {
        std::fs::write(&full, actual).expect("write expected file");
        return;
    }
    let expected = std::fs::read_to_string(&full).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with DOVETAIL_BLESS=1 to create it)",
            full.display()
        )
    });
    if expected != actual {
        let diff = similar::TextDiff::from_lines(&expected, actual)
            .unified_diff()
            .header("expected", "actual")
            .to_string();
        panic!("output differs from {}:\n{diff}", path.display());
    }
}
