//! `dovetail diff`: what changes between two commits, as text, Markdown for a
//! pull-request comment, or JSON.

use std::fmt::Write as _;

use serde_json::json;

use super::args::{DiffArgs, OutputFormat};
use super::render::{self, Style};
use super::validate::display_prefix;
use super::{Io, exit};
use crate::config::diff::{self, Change, Comparison, ObjectDiff, Outcome, Revisions, Side};
use crate::config::validate::{Options, Report};
use crate::config::yaml::Limits;
use crate::diag::{Diagnostic, Severity};

pub fn run(a: &DiffArgs, io: &mut Io) -> u8 {
    let revisions = match diff::read(&a.path, &a.from, &a.to, a.merge_base, &Limits::default()) {
        Ok(r) => r,
        Err(e) => {
            io.error(&e, e.hint().as_deref());
            return exit::ERROR;
        }
    };
    let opts = Options {
        allow_external_nodeclass: a.allow_external_nodeclass,
        path_prefix: display_prefix(&a.path),
        ..Options::default()
    };
    let comparison = match diff::diff(&revisions, &opts) {
        Outcome::Compared(c) => c,
        Outcome::InvalidTo(report) => {
            invalid_to(&revisions.to, &report, io);
            return exit::ERROR;
        }
    };
    let rendered = match a.output {
        OutputFormat::Json => json_output(&revisions, &comparison),
        OutputFormat::Markdown => markdown(&revisions, &comparison),
        // Text; the argument parser admits no other format.
        _ => text(
            &revisions,
            &comparison,
            Style::for_stream(io.out_is_terminal),
        ),
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
        io.log(&format!("diff: {}", counts(&comparison)));
    }
    if comparison.has_errors() {
        exit::ERROR
    } else if comparison.has_differences() {
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
    io.log(&format!(
        "{}: `{}` ({}) is invalid ({errors} error{}); diff needs a valid --to revision",
        style.severity(Severity::Error),
        to.git_ref,
        to.short_sha(),
        if errors == 1 { "" } else { "s" }
    ));
    io.log(&format!(
        "hint: fix the errors above; `dovetail validate --ref {}` checks the revision",
        to.git_ref
    ));
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
        format!("{} ({})", r.from.git_ref, r.from.short_sha())
    };
    format!("{from} -> {} ({})", r.to.git_ref, r.to.short_sha())
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

fn text(r: &Revisions, c: &Comparison, style: Style) -> String {
    let s = c.summary();
    let deleted = format!("{} deleted", s.deleted);
    let mut out = format!(
        "diff {}: {} created, {} changed, {}, {} unchanged\n",
        range(r),
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

fn markdown(r: &Revisions, c: &Comparison) -> String {
    let s = c.summary();
    let mut out = String::from("### dovetail diff\n\n");
    let _ = writeln!(out, "`{}`\n", range(r).replace('`', "'"));
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

fn json_output(r: &Revisions, c: &Comparison) -> String {
    let doc = json!({
        "schema_version": 1,
        "from": r.from,
        "to": r.to,
        "merge_base": r.merge_base,
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
        let plain = text(&revisions(), &c, Style { color: false });
        assert_eq!(
            plain.lines().next(),
            Some(
                "diff main (aaaaaaa) -> HEAD (bbbbbbb): 0 created, 0 changed, 1 deleted, 1 unchanged"
            )
        );
        assert!(!plain.contains('\x1b'));
        let coloured = text(&revisions(), &c, Style { color: true });
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
        let coloured = text(&revisions(), &c, Style { color: true });
        assert!(!coloured.contains("\x1b[1;31m"), "{coloured:?}");
        assert!(coloured.contains("no differences\n"));
    }

    #[test]
    fn fences_are_longer_than_any_backtick_run() {
        assert_eq!(fence("plain"), "```");
        assert_eq!(fence("a ```` b"), "`````");
    }
}
