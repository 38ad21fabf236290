//! `dovetail diff`: what changes between two commits, or between the live
//! cluster and a commit (`--cluster`), as text, Markdown for a pull-request
//! comment, or JSON; with `--impact`, what the change does to running nodes.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::args::{DiffArgs, OutputFormat};
use super::forecast;
use super::impact::{self, ImpactError, Settings};
use super::live::{self, LiveError};
use super::render::{self, Style};
use super::validate::display_prefix;
use super::{Io, exit};
use crate::api::ApiKind;
use crate::config::diff::impact::ImpactReport;
use crate::config::diff::{self, Change, Comparison, ObjectDiff, Revisions, Side};
use crate::config::validate::{self, Object, Options, Report};
use crate::config::yaml::Limits;
use crate::diag::{Diagnostic, Pos, Severity};
use crate::drift::NodeView;
use crate::simulate::forecast::{Forecast, Settings as ForecastSettings};
use crate::snapshot::Located;

/// The file shown for an object that is only in the live cluster.
const LIVE_FILE: &str = "(live cluster)";

/// What the output's header says was compared.
struct Header {
    /// `main (1a2b3c4) -> HEAD (5d6e7f8)`.
    range: String,
    from: Value,
    to: Value,
    merge_base: bool,
}

impl Header {
    fn revisions(r: &Revisions) -> Self {
        Header {
            range: range(r),
            from: serde_json::to_value(&r.from).unwrap_or(Value::Null),
            to: serde_json::to_value(&r.to).unwrap_or(Value::Null),
            merge_base: r.merge_base,
        }
    }

    fn cluster(to: &Side) -> Self {
        Header {
            range: format!("live cluster -> {} ({})", to.git_ref, to.short_sha()),
            from: json!({ "cluster": true }),
            to: serde_json::to_value(to).unwrap_or(Value::Null),
            merge_base: false,
        }
    }
}

/// The impact section and the objects it could not consider.
type Impact = (ImpactReport, Vec<String>);

fn options(a: &DiffArgs) -> Options {
    Options {
        allow_external_nodeclass: a.allow_external_nodeclass,
        path_prefix: display_prefix(&a.path),
        ..Options::default()
    }
}

/// The settings of `--impact`, or an error printed with its hint.
fn impact_settings(a: &DiffArgs, io: &mut Io) -> Result<Option<Settings>, u8> {
    if !a.impact {
        return Ok(None);
    }
    let settings = if a.snapshot.is_none() && !a.cluster {
        Err(ImpactError::NoNodes)
    } else {
        Settings::read(&a.replacement_time, a.catalog.as_deref())
    };
    settings.map(Some).map_err(|e| impact_failed(&e, io))
}

/// The `--impact` settings of parsed arguments, for tests that call
/// [`run_cluster`] directly.
#[cfg(test)]
pub(crate) fn impact_settings_for_tests(a: &DiffArgs) -> Option<Settings> {
    a.impact
        .then(|| Settings::read(&a.replacement_time, a.catalog.as_deref()).unwrap())
}

fn impact_failed(e: &ImpactError, io: &mut Io) -> u8 {
    match e {
        ImpactError::Snapshot(read @ crate::snapshot::ReadError::Invalid(_)) => io.read_error(
            read,
            "--snapshot takes Kubernetes objects as kubectl prints them (-o yaml or -o json)",
        ),
        _ => io.error(e, e.hint()),
    }
    exit::ERROR
}

fn live_failed(e: &LiveError, io: &mut Io) -> u8 {
    io.error(e, e.hint());
    exit::ERROR
}

pub fn run(a: &DiffArgs, io: &mut Io) -> u8 {
    let settings = match impact_settings(a, io) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let forecast_settings = match forecast::settings(a) {
        Ok(s) => s,
        Err(message) => {
            io.log(&format!("error: {message}"));
            return exit::ERROR;
        }
    };
    if a.cluster {
        let connected = live::runtime().and_then(|rt| {
            let client = rt.block_on(live::connect())?;
            Ok((rt, client))
        });
        return match connected {
            Ok((rt, client)) => run_cluster(a, io, settings, forecast_settings, &rt, &client),
            Err(e) => live_failed(&e, io),
        };
    }
    let from = match (a.from.as_deref(), a.worktree) {
        (Some(from), _) => from,
        (None, true) => "HEAD",
        (None, false) => {
            // The argument parser requires --from without --cluster or --worktree.
            io.log("error: --from REF is required unless --cluster or --worktree is given");
            return exit::ERROR;
        }
    };
    let nodes = match (&settings, &a.snapshot) {
        (Some(_), Some(path)) => match impact::nodes_from_snapshot(path) {
            Ok(nodes) => nodes,
            Err(e) => return impact_failed(&e, io),
        },
        _ => Vec::new(),
    };
    let read = if a.worktree {
        diff::read_worktree(&a.path, from, &Limits::default())
    } else {
        diff::read(&a.path, from, &a.to, a.merge_base, &Limits::default())
    };
    let revisions = match read {
        Ok(r) => r,
        Err(e) => {
            io.error(&e, e.hint().as_deref());
            return exit::ERROR;
        }
    };
    let compared = match diff::diff_with_objects(&revisions, &options(a)) {
        Ok(c) => c,
        Err(report) => {
            invalid_to(&revisions.to, &report, io);
            return exit::ERROR;
        }
    };
    let impact = match settings
        .map(|s| impact::build(&compared.from, &compared.to, &nodes, &s))
        .transpose()
    {
        Ok(i) => i,
        Err(e) => return impact_failed(&e, io),
    };
    let forecast = match (&forecast_settings, &a.snapshot) {
        (Some(fs), Some(path)) => {
            if compared
                .comparison
                .diagnostics
                .iter()
                .any(|d| d.code == crate::config::diff::codes::INVALID_FROM)
            {
                io.log(&format!(
                    "error: --forecast needs a valid --from revision: `{}` ({}) is invalid",
                    revisions.from.git_ref,
                    revisions.from.short_sha()
                ));
                return exit::ERROR;
            }
            let prefix = display_prefix(&a.path);
            let start = match forecast::start_from_file(path, io) {
                Ok(s) => s,
                Err(code) => return code,
            };
            let sides = (
                forecast::side(revisions.from.label(), &compared.from, &prefix),
                forecast::side(revisions.to.label(), &compared.to, &prefix),
            );
            match forecast::run(&start, fs, sides, a.forecast_reports.as_deref(), io) {
                Ok(f) => Some(f),
                Err(code) => return code,
            }
        }
        _ => None,
    };
    finish(
        a,
        io,
        &Header::revisions(&revisions),
        &compared.comparison,
        impact.as_ref(),
        forecast.as_ref(),
    )
}

/// `diff --cluster` with a client: the live NodePools and EC2NodeClasses
/// against the repository at `--to`; with `--impact`, the live nodes.
pub(crate) fn run_cluster(
    a: &DiffArgs,
    io: &mut Io,
    settings: Option<Settings>,
    forecast_settings: Option<ForecastSettings>,
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
) -> u8 {
    let (side, loaded) = match diff::read_one(&a.path, &a.to, &Limits::default()) {
        Ok(r) => r,
        Err(e) => {
            io.error(&e, e.hint().as_deref());
            return exit::ERROR;
        }
    };
    let opts = options(a);
    let to = validate::validate(&loaded, &opts);
    if !to.passes(false) {
        invalid_to(&side, &to, io);
        return exit::ERROR;
    }
    // NodeOverlays and CapacityBuffers are listed when the repository has
    // some: a cluster without their CRDs (the gates off) answers 404.
    let mut kinds = vec![live::NODEPOOL, live::EC2NODECLASS];
    for (kind, live_kind) in [
        (ApiKind::NodeOverlay, live::NODEOVERLAY),
        (ApiKind::CapacityBuffer, live::CAPACITYBUFFER),
    ] {
        if to.objects_of(kind).next().is_some() {
            kinds.push(live_kind);
        }
    }
    let live = match rt.block_on(live::list_all(client, &kinds)) {
        Ok(values) => live_objects(&values, &to.objects),
        Err(e) => return live_failed(&e, io),
    };
    let mut comparison = diff::compare(&live, &to.objects, &loaded, &opts);
    for o in &mut comparison.objects {
        if o.file.ends_with(LIVE_FILE) {
            o.file = LIVE_FILE.to_string();
        }
    }
    let impact = match settings {
        None => None,
        Some(settings) => {
            let nodes = match rt.block_on(live::list_all(client, &[live::NODE, live::NODECLAIM])) {
                Ok(values) => live_nodes(values),
                Err(e) => return live_failed(&e, io),
            };
            match nodes.and_then(|nodes| impact::build(&live, &to.objects, &nodes, &settings)) {
                Ok(i) => Some(i),
                Err(e) => return impact_failed(&e, io),
            }
        }
    };
    let forecast = match forecast_settings {
        None => None,
        Some(fs) => {
            let start = match rt.block_on(live::snapshot(client)) {
                Ok(snapshot) => {
                    let items = match snapshot {
                        Value::Object(mut o) => o.remove("items"),
                        _ => None,
                    };
                    let values = match items {
                        Some(Value::Array(v)) => v,
                        _ => Vec::new(),
                    };
                    match forecast::start_from_values(values, io) {
                        Ok(s) => s,
                        Err(code) => return code,
                    }
                }
                Err(e) => return live_failed(&e, io),
            };
            let prefix = display_prefix(&a.path);
            let sides = (
                forecast::side("live cluster".to_string(), &live, LIVE_FILE),
                forecast::side(side.label(), &to.objects, &prefix),
            );
            match forecast::run(&start, &fs, sides, a.forecast_reports.as_deref(), io) {
                Ok(f) => Some(f),
                Err(code) => return code,
            }
        }
    };
    finish(
        a,
        io,
        &Header::cluster(&side),
        &comparison,
        impact.as_ref(),
        forecast.as_ref(),
    )
}

/// Live NodePools and EC2NodeClasses as the objects `compare` takes; an
/// object also in the repository is given its file there, so it is not
/// reported as moved.
fn live_objects(values: &[Value], repo: &[Object]) -> Vec<Object> {
    values
        .iter()
        .filter_map(|v| {
            let kind = ApiKind::from_type_meta(
                v.get("apiVersion").and_then(Value::as_str)?,
                v.get("kind").and_then(Value::as_str)?,
            )?;
            let name = v
                .pointer("/metadata/name")
                .and_then(Value::as_str)?
                .to_string();
            let key = kind.object_name(v);
            let file = repo
                .iter()
                .find(|o| o.kind == kind && o.key() == key)
                .map_or_else(|| LIVE_FILE.to_string(), |o| o.file.clone());
            Some(Object {
                kind,
                name,
                file,
                index: 0,
                pos: Pos::default(),
                name_pos: Pos::default(),
                value: v.clone(),
                valid: true,
            })
        })
        .collect()
}

/// The node set of live Nodes and NodeClaims.
fn live_nodes(values: Vec<Value>) -> Result<Vec<NodeView>, ImpactError> {
    let objects: Vec<Located> = values
        .into_iter()
        .map(|object| Located { line: 0, object })
        .collect();
    impact::nodes_from_objects(LIVE_FILE, &objects)
}

/// Renders the comparison (and the impact) and returns the exit code.
fn finish(
    a: &DiffArgs,
    io: &mut Io,
    header: &Header,
    comparison: &Comparison,
    impact: Option<&Impact>,
    forecast: Option<&Forecast>,
) -> u8 {
    let rendered = match a.output {
        OutputFormat::Json => json_output(header, comparison, impact, forecast),
        OutputFormat::Markdown => {
            let mut md = markdown(header, comparison);
            if let Some((report, skipped)) = impact {
                md.push_str(&impact::markdown(report, skipped));
            }
            if let Some(f) = forecast {
                md.push_str(&f.markdown());
            }
            md
        }
        // Text; the argument parser admits no other format.
        _ => {
            let style = Style::for_stream(io.out_is_terminal);
            let mut out = text(header, comparison, style);
            if let Some((report, skipped)) = impact {
                out.push_str(&impact::text(report, skipped, style));
            }
            if let Some(f) = forecast {
                out.push_str(&f.text());
            }
            out
        }
    };
    io.data(&rendered);
    if a.output != OutputFormat::Text {
        // The document carries the diagnostics; the log shows them too.
        let shown: Vec<Diagnostic> = comparison
            .diagnostics
            .iter()
            .filter(|d| d.severity != Severity::Note)
            .cloned()
            .collect();
        let style = Style::for_stream(io.err_is_terminal);
        let _ = write!(io.err, "{}", render::text(&shown, style));
        io.log(&format!("diff: {}", counts(comparison)));
    }
    if comparison.has_errors() {
        exit::ERROR
    } else if comparison.has_differences() || forecast.is_some_and(Forecast::differs) {
        exit::PROBLEM
    } else {
        exit::OK
    }
}

/// The validator's diagnostics and why diff stops, on stderr.
fn invalid_to(to: &Side, report: &Report, io: &mut Io) {
    let style = Style::for_stream(io.err_is_terminal);
    let _ = write!(io.err, "{}", render::text(&report.diagnostics, style));
    let errors = report.count(Severity::Error);
    let what = if to.is_worktree() {
        to.git_ref.clone()
    } else {
        format!("`{}` ({})", to.git_ref, to.short_sha())
    };
    io.log(&format!(
        "{}: {what} is invalid ({errors} error{}); diff needs a valid --to revision",
        style.severity(Severity::Error),
        if errors == 1 { "" } else { "s" }
    ));
    io.log(&if to.is_worktree() {
        "hint: fix the errors above; `dovetail validate --worktree` checks the files on disk"
            .to_string()
    } else {
        format!(
            "hint: fix the errors above; `dovetail validate --ref {}` checks the revision",
            to.git_ref
        )
    });
}

/// `1 created, 2 changed, 1 deleted, 3 unchanged`.
fn counts(c: &Comparison) -> String {
    let s = c.summary();
    format!(
        "{} created, {} changed, {} deleted, {} unchanged",
        s.created, s.changed, s.deleted, s.unchanged
    )
}

/// `main (1a2b3c4) -> HEAD (5d6e7f8)`, naming the merge base when it is used.
fn range(r: &Revisions) -> String {
    let from = if r.merge_base {
        format!(
            "merge base of {} and {} ({})",
            r.from.git_ref,
            r.to.git_ref,
            r.from.short_sha()
        )
    } else {
        r.from.label()
    };
    format!("{from} -> {}", r.to.label())
}

fn paint(style: Style, code: &str, s: &str) -> String {
    if style.color {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

const RED_BOLD: &str = "1;31";
const RED: &str = "31";
const GREEN: &str = "32";
const YELLOW: &str = "33";
const CYAN: &str = "36";

fn text(h: &Header, c: &Comparison, style: Style) -> String {
    let s = c.summary();
    let deleted = format!("{} deleted", s.deleted);
    let mut out = format!(
        "diff {}: {} created, {} changed, {}, {} unchanged\n",
        h.range,
        s.created,
        s.changed,
        if s.deleted > 0 {
            paint(style, RED_BOLD, &deleted)
        } else {
            deleted
        },
        s.unchanged
    );
    let listed: Vec<&ObjectDiff> = c
        .objects
        .iter()
        .filter(|o| o.change != Change::Unchanged)
        .collect();
    if listed.is_empty() {
        out.push_str("no differences\n");
    }
    let width = listed.iter().map(|o| o.display().len()).max().unwrap_or(0);
    for o in &listed {
        let (mark, code) = match o.change {
            Change::Created => ("+", GREEN),
            Change::Changed => ("~", YELLOW),
            Change::Deleted => ("-", RED_BOLD),
            Change::Unchanged => (" ", ""),
        };
        let label = format!("{mark} {:<9}", o.change.as_str());
        let _ = writeln!(
            out,
            "  {} {:<width$}  {}",
            paint(style, code, &label),
            o.display(),
            o.file
        );
    }
    if !c.diagnostics.is_empty() {
        out.push('\n');
        out.push_str(&render::text(&c.diagnostics, style));
    }
    for o in &listed {
        let _ = write!(out, "\n{} {}", style.bold(&o.display()), o.change);
        if !o.changed_paths.is_empty() {
            let paths: Vec<String> = o.changed_paths.iter().map(ToString::to_string).collect();
            let _ = write!(out, ": {}", paths.join(", "));
        }
        out.push('\n');
        for line in o.diff.lines() {
            let code = if line.starts_with("+++") || line.starts_with("---") {
                "1"
            } else if line.starts_with('+') {
                GREEN
            } else if line.starts_with('-') {
                RED
            } else if line.starts_with("@@") {
                CYAN
            } else {
                ""
            };
            if code.is_empty() {
                let _ = writeln!(out, "{line}");
            } else {
                let _ = writeln!(out, "{}", paint(style, code, line));
            }
        }
    }
    out
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A code fence longer than any run of backticks in `body`.
fn fence(body: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    "`".repeat((longest + 1).max(3))
}

fn markdown(h: &Header, c: &Comparison) -> String {
    let s = c.summary();
    let mut out = String::from("### dovetail diff\n\n");
    let _ = writeln!(out, "`{}`\n", h.range.replace('`', "'"));
    let deleted = if s.deleted > 0 {
        format!("**{}**", s.deleted)
    } else {
        "0".to_string()
    };
    let _ = writeln!(
        out,
        "| Created | Changed | Deleted | Unchanged |\n|---:|---:|---:|---:|\n| {} | {} | {deleted} | {} |\n",
        s.created, s.changed, s.unchanged
    );
    let listed: Vec<&ObjectDiff> = c
        .objects
        .iter()
        .filter(|o| o.change != Change::Unchanged || o.previous_file.is_some())
        .collect();
    if listed.is_empty() {
        out.push_str("No differences.\n");
    } else {
        out.push_str("| Object | Change | File | Changed fields |\n|---|---|---|---|\n");
        for o in &listed {
            let change = match o.change {
                Change::Deleted => "**deleted**".to_string(),
                Change::Unchanged => "moved".to_string(),
                other => other.to_string(),
            };
            let file = match &o.previous_file {
                Some(prev) => format!("`{}` → `{}`", md_cell(prev), md_cell(&o.file)),
                None => format!("`{}`", md_cell(&o.file)),
            };
            let paths: Vec<String> = o
                .changed_paths
                .iter()
                .map(|p| format!("`{}`", md_cell(&p.to_string())))
                .collect();
            let _ = writeln!(
                out,
                "| `{}` | {change} | {file} | {} |",
                o.display(),
                paths.join(", ")
            );
        }
    }
    // Moves are in the table already.
    let diagnostics: Vec<&Diagnostic> = c
        .diagnostics
        .iter()
        .filter(|d| d.code != diff::codes::MOVED)
        .collect();
    if !diagnostics.is_empty() {
        out.push('\n');
        for d in diagnostics {
            let _ = write!(out, "- **{}**", d.severity);
            if !d.file.is_empty() {
                let _ = write!(out, " `{}:{}:{}`", d.file, d.line, d.column);
            }
            if let Some(o) = &d.object {
                let _ = write!(out, " `{o}`");
            }
            if !d.path.is_root() {
                let _ = write!(out, " `{}`", d.path);
            }
            let _ = write!(out, ": {}", d.message.replace('\n', " "));
            if let Some(h) = &d.hint {
                let _ = write!(out, " (hint: {})", h.replace('\n', " "));
            }
            out.push('\n');
        }
    }
    for o in listed.iter().filter(|o| !o.diff.is_empty()) {
        let fence = fence(&o.diff);
        let _ = write!(
            out,
            "\n<details><summary><code>{}</code> {}</summary>\n\n{fence}diff\n{}{fence}\n\n</details>\n",
            html_escape(&o.display()),
            o.change,
            o.diff
        );
    }
    out
}

fn json_output(
    h: &Header,
    c: &Comparison,
    impact: Option<&Impact>,
    forecast: Option<&Forecast>,
) -> String {
    let mut doc = json!({
        "schema_version": 1,
        "from": h.from,
        "to": h.to,
        "merge_base": h.merge_base,
        "summary": c.summary(),
        "objects": c.objects.iter().map(|o| json!({
            "kind": o.kind.kind(),
            "name": o.name,
            "change": o.change.as_str(),
            "file": o.file,
            "previous_file": o.previous_file,
            "changed_paths": o.changed_paths,
            "diff": o.diff,
        })).collect::<Vec<_>>(),
        "diagnostics": c.diagnostics.iter().map(render::json_diagnostic).collect::<Vec<_>>(),
    });
    if let (Some((report, skipped)), Some(object)) = (impact, doc.as_object_mut()) {
        object.insert("impact".into(), impact::json(report, skipped));
    }
    if let (Some(f), Some(object)) = (forecast, doc.as_object_mut()) {
        object.insert(
            "forecast".into(),
            serde_json::to_value(f).unwrap_or(Value::Null),
        );
    }
    format!(
        "{}\n",
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ApiKind;
    use crate::config::load::Loaded;

    fn revisions() -> Revisions {
        let side = |r: &str, sha: &str| Side {
            git_ref: r.to_string(),
            sha: sha.repeat(40),
        };
        Revisions {
            from: side("main", "a"),
            to: side("HEAD", "b"),
            merge_base: false,
            from_loaded: Some(Loaded::default()),
            to_loaded: Loaded::default(),
        }
    }

    fn object(name: &str, change: Change) -> ObjectDiff {
        ObjectDiff {
            kind: ApiKind::NodePool,
            name: name.to_string(),
            change,
            file: format!("{name}.yaml"),
            previous_file: None,
            changed_paths: Vec::new(),
            diff: match change {
                Change::Deleted => {
                    "--- a.yaml\n+++ /dev/null\n@@ -1 +0,0 @@\n-kind: NodePool\n".to_string()
                }
                _ => String::new(),
            },
        }
    }

    #[test]
    fn deletions_are_highlighted_in_colour_only_when_asked() {
        let c = Comparison {
            objects: vec![
                object("old", Change::Deleted),
                object("same", Change::Unchanged),
            ],
            diagnostics: Vec::new(),
        };
        let plain = text(&Header::revisions(&revisions()), &c, Style { color: false });
        assert_eq!(
            plain.lines().next(),
            Some(
                "diff main (aaaaaaa) -> HEAD (bbbbbbb): 0 created, 0 changed, 1 deleted, 1 unchanged"
            )
        );
        assert!(!plain.contains('\x1b'));
        let coloured = text(&Header::revisions(&revisions()), &c, Style { color: true });
        assert!(
            coloured.contains("\x1b[1;31m1 deleted\x1b[0m"),
            "{coloured:?}"
        );
        assert!(
            coloured.contains("\x1b[31m-kind: NodePool\x1b[0m"),
            "{coloured:?}"
        );
        // Nothing deleted: nothing red.
        let c = Comparison {
            objects: vec![object("same", Change::Unchanged)],
            diagnostics: Vec::new(),
        };
        let coloured = text(&Header::revisions(&revisions()), &c, Style { color: true });
        assert!(!coloured.contains("\x1b[1;31m"), "{coloured:?}");
        assert!(coloured.contains("no differences\n"));
    }

    #[test]
    fn fences_are_longer_than_any_backtick_run() {
        assert_eq!(fence("plain"), "```");
        assert_eq!(fence("a ```` b"), "`````");
    }
}
