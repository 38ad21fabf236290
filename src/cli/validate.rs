//! `dovetail validate`.

use std::path::Path;
use std::time::Instant;

use serde_json::json;

use super::args::{OutputFormat, RepoArgs, ValidateArgs};
use super::render::{self, Style};
use super::{CATALOG_HINT, Io, exit};
use crate::config::load::{self, Loaded};
use crate::config::source::Revision;
use crate::config::validate::{self, Options, Report};
use crate::config::yaml::Limits;
use crate::diag::Severity;

/// Reads the repository named by `repo`, printing the error and returning
/// the exit code when it cannot be read at all.
pub(crate) fn load_repo(repo: &RepoArgs, io: &mut Io) -> Result<Loaded, u8> {
    let rev = if repo.worktree {
        Revision::Worktree
    } else {
        Revision::Ref(repo.git_ref.clone().unwrap_or_else(|| "HEAD".to_string()))
    };
    load::load(&repo.path, &rev, repo.git_ref.is_some(), &Limits::default()).map_err(|e| {
        io.error(&e, e.hint().as_deref());
        exit::ERROR
    })
}

/// The prefix that turns repository-relative paths into paths as the user
/// addressed them (`examples-repo/pools/a.yaml`).
pub(crate) fn display_prefix(path: &Path) -> String {
    let s = path.to_string_lossy();
    let s = s.trim_end_matches('/');
    if s.is_empty() || s == "." {
        String::new()
    } else {
        format!("{}/", s.strip_prefix("./").unwrap_or(s))
    }
}

pub fn run(a: &ValidateArgs, io: &mut Io) -> u8 {
    let start = Instant::now();
    let loaded = match load_repo(&a.repo, io) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let load_time = start.elapsed();
    let catalog = match a
        .catalog
        .as_deref()
        .map(crate::model::catalog::read_catalog)
    {
        None => None,
        Some(Ok(c)) => Some(std::sync::Arc::new(c)),
        Some(Err(e)) => {
            io.error(&e, Some(CATALOG_HINT));
            return exit::ERROR;
        }
    };
    let gates = match super::feature_gates(a.feature_gates.as_deref(), Default::default()) {
        Ok(g) => g,
        Err(e) => {
            io.log(&format!("error: {e}"));
            return exit::ERROR;
        }
    };
    let prefix = display_prefix(&a.repo.path);
    let opts = Options {
        allow_external_nodeclass: a.allow_external_nodeclass,
        path_prefix: prefix.clone(),
        catalog,
        static_capacity: Some(gates.static_capacity),
        node_overlay: Some(gates.node_overlay),
        capacity_buffer: Some(gates.capacity_buffer),
    };
    let report = validate::validate(&loaded, &opts);
    let passes = report.passes(a.strict);
    if a.repo.git_ref.is_none() && !a.repo.worktree {
        revision_note(&a.repo, &loaded, io);
    }
    let rendered = render_report(
        a,
        &report,
        &prefix,
        load_time.as_secs_f64(),
        io.out_is_terminal,
    );
    io.data(&rendered);
    if a.output != OutputFormat::Text {
        io.log(&summary(&report));
    }
    let (errors, warnings) = (
        report.count(Severity::Error),
        report.count(Severity::Warning),
    );
    if a.strict && errors == 0 && warnings > 0 {
        io.log(&format!(
            "validate: --strict: the {} fail{} the run (without --strict it would pass)",
            plural(warnings, "warning"),
            if warnings == 1 { "s" } else { "" }
        ));
    }
    if passes { exit::OK } else { exit::PROBLEM }
}

/// In a git repository without `--ref` or `--worktree`, which revision was
/// read, and the YAML files whose changes on disk were therefore not.
fn revision_note(repo: &RepoArgs, loaded: &Loaded, io: &mut Io) {
    let Some(commit) = &loaded.commit else {
        return;
    };
    let at = match &commit.branch {
        Some(b) => format!("HEAD ({b} at {})", &commit.sha[..commit.sha.len().min(12)]),
        None => format!("HEAD ({})", &commit.sha[..commit.sha.len().min(12)]),
    };
    let changed = crate::config::source::Repo::open(&repo.path)
        .ok()
        .flatten()
        .and_then(|r| r.uncommitted_yaml().ok())
        .unwrap_or_default();
    if changed.is_empty() {
        io.log(&format!("validate: checked the committed tree of {at}"));
        return;
    }
    const SHOWN: usize = 5;
    let mut names = changed
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if changed.len() > SHOWN {
        names.push_str(&format!(", and {} more", changed.len() - SHOWN));
    }
    io.log(&format!(
        "validate: checked the committed tree of {at}; {} with uncommitted changes (modified or untracked) not checked: {names}",
        plural(changed.len(), "YAML file")
    ));
    io.log("hint: `dovetail validate --worktree` checks the files on disk");
}

fn plural(n: usize, w: &str) -> String {
    format!(
        "{} {w}{}",
        render::thousands(n),
        if n == 1 { "" } else { "s" }
    )
}

fn summary(r: &Report) -> String {
    format!(
        "validate: {}, {} in {} ({})",
        plural(r.count(Severity::Error), "error"),
        plural(r.count(Severity::Warning), "warning"),
        plural(r.files, "file"),
        plural(r.objects.len(), "object"),
    )
}

fn render_report(
    a: &ValidateArgs,
    r: &Report,
    prefix: &str,
    load_seconds: f64,
    terminal: bool,
) -> String {
    match a.output {
        // Text; the argument parser admits no HTML for validate.
        OutputFormat::Text | OutputFormat::Html => {
            let style = Style::for_stream(terminal);
            format!("{}{}\n", render::text(&r.diagnostics, style), summary(r))
        }
        OutputFormat::Json => {
            let doc = json!({
                "schema_version": 1,
                "valid": r.passes(a.strict),
                "strict": a.strict,
                "files": r.files,
                "documents": r.documents,
                "error_count": r.count(Severity::Error),
                "warning_count": r.count(Severity::Warning),
                "objects": r.objects.iter().map(|o| json!({
                    "kind": o.kind.kind(),
                    "name": o.name,
                    "file": format!("{prefix}{}", o.file),
                    "line": o.pos.line,
                    "valid": o.valid,
                })).collect::<Vec<_>>(),
                "diagnostics": r.diagnostics.iter().map(render::json_diagnostic).collect::<Vec<_>>(),
                "timings": {
                    "load_seconds": load_seconds,
                    "phases": r.timings,
                },
            });
            format!("{}\n", serde_json::to_string_pretty(&doc).expect("json"))
        }
        OutputFormat::Junit => {
            let files: Vec<String> = r
                .objects
                .iter()
                .map(|o| format!("{prefix}{}", o.file))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            render::junit("dovetail validate", &files, &r.diagnostics, a.strict)
        }
        OutputFormat::Github => render::github(&r.diagnostics),
        OutputFormat::Sarif => format!(
            "{}\n",
            serde_json::to_string_pretty(&render::sarif(&r.diagnostics)).expect("json")
        ),
        OutputFormat::Markdown => render::markdown("dovetail validate", &r.diagnostics),
    }
}
