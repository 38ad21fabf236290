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

/// Writes into `dir` a kustomization of `deploy/` with the named
/// components of `deploy/components/`, as a user's overlay (kustomize takes
/// bases by relative path only).
pub fn deploy_overlay(dir: &Path, components: &[&str]) {
    let dir = dir.canonicalize().expect("canonical");
    let up = "../".repeat(dir.components().count() - 1);
    let deploy = root().join("deploy").canonicalize().expect("canonical");
    let base = format!(
        "{up}{}",
        deploy.strip_prefix("/").expect("absolute").display()
    );
    let components: Vec<String> = components
        .iter()
        .map(|c| format!("{base}/components/{c}"))
        .collect();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "resources: [{base}]\ncomponents: [{}]\n",
            components.join(", ")
        ),
    )
    .expect("write the overlay");
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

/// What the bundled demo writes, from two runs of `dovetail simulate`
/// shared by the suites that read them (the demo takes seconds in a debug
/// build): `--metrics FILE --output html --output-file FILE`, and
/// `--metrics FILE --metrics-every 5m --metrics-label job=karpenter
/// --output json --output-file FILE`.
pub struct DemoOutputs {
    /// The directory holding the files.
    pub dir: PathBuf,
    /// The Prometheus text at the end of the run.
    pub metrics: String,
    /// The HTML report, and where it is.
    pub html: String,
    pub html_path: PathBuf,
    /// The OpenMetrics snapshots, every 5 minutes, labelled
    /// `job="karpenter"`, and where they are.
    pub snapshots: String,
    pub snapshots_path: PathBuf,
    /// The JSON report.
    pub report: serde_json::Value,
}

/// The demo's outputs, run once per test binary.
pub fn demo_outputs() -> &'static DemoOutputs {
    static OUTPUTS: std::sync::OnceLock<DemoOutputs> = std::sync::OnceLock::new();
    OUTPUTS.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dovetail-demo-outputs");
        std::fs::create_dir_all(&dir).expect("a directory for the demo's outputs");
        let path = |name: &str| dir.join(name).display().to_string();
        let (metrics, html) = (path("demo.prom"), path("demo.html"));
        let out = dovetail(&[
            "simulate",
            "--metrics",
            &metrics,
            "--output",
            "html",
            "--output-file",
            &html,
        ]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_eq!(out.stdout, "", "the report goes to the file");
        let (snapshots, json) = (path("demo.om"), path("demo.json"));
        let out = dovetail(&[
            "simulate",
            "--metrics",
            &snapshots,
            "--metrics-every",
            "5m",
            "--metrics-label",
            "job=karpenter",
            "-o",
            "json",
            "--output-file",
            &json,
        ]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        DemoOutputs {
            metrics: read(&metrics),
            html: read(&html),
            html_path: PathBuf::from(&html),
            snapshots: read(&snapshots),
            snapshots_path: PathBuf::from(&snapshots),
            report: serde_json::from_str(&read(&json)).expect("the JSON report"),
            dir,
        }
    })
}
