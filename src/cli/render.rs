//! Rendering diagnostics in every output format a PR check may want: text
//! for people, JSON for scripts, JUnit for test reporters, GitHub workflow
//! annotations, SARIF for code scanning, and Markdown for PR comments.

use std::fmt::Write as _;

use serde_json::json;

use crate::diag::{Diagnostic, Severity};

/// Styles for text output. Colour only on a terminal and never with `NO_COLOR`.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
}

impl Style {
    /// Decides colour for a stream, honouring `NO_COLOR`.
    pub fn for_stream(is_terminal: bool) -> Self {
        let no_color =
            std::env::var_os(crate::cli::args::env::NO_COLOR).is_some_and(|v| !v.is_empty());
        Style {
            color: is_terminal && !no_color,
        }
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }

    pub fn severity(&self, s: Severity) -> String {
        match s {
            Severity::Error => self.paint("1;31", "error"),
            Severity::Warning => self.paint("1;33", "warning"),
            Severity::Note => self.paint("1;36", "note"),
        }
    }

    pub fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }
}

/// Text output shows at most this many diagnostics of one check (severity
/// and code); the rest are counted in one line.
pub const TEXT_PER_CHECK: usize = 20;

pub use crate::diag::thousands;

/// `file:line:col: severity: Kind/name: path: message`, then `  hint: ...`.
///
/// So that 10,000 copies of one mistake do not bury the rest: each hint is
/// printed once, after the first diagnostic that has it, and a check's
/// diagnostics beyond [`TEXT_PER_CHECK`] are counted in a last line (every
/// other output format lists them all).
pub fn text(diags: &[Diagnostic], style: Style) -> String {
    let mut out = String::new();
    let mut hints: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut per_check: std::collections::BTreeMap<(Severity, &str), usize> =
        std::collections::BTreeMap::new();
    for d in diags {
        let n = per_check.entry((d.severity, d.code)).or_default();
        *n += 1;
        if *n > TEXT_PER_CHECK {
            continue;
        }
        let mut loc = String::new();
        if !d.file.is_empty() {
            loc.push_str(&d.file);
            if d.line > 0 {
                let _ = write!(loc, ":{}:{}", d.line, d.column);
            }
            loc.push_str(": ");
        }
        let _ = write!(out, "{}{}", style.bold(&loc), style.severity(d.severity));
        if let Some(o) = &d.object {
            let _ = write!(out, ": {o}");
        }
        if !d.path.is_root() {
            let _ = write!(out, ": {}", d.path);
        }
        let _ = writeln!(out, ": {}", d.message);
        if let Some(h) = &d.hint
            && hints.insert(h.as_str())
        {
            let _ = writeln!(out, "  hint: {h}");
        }
    }
    for ((severity, code), n) in per_check {
        if n > TEXT_PER_CHECK {
            let _ = writeln!(
                out,
                "{}: {} more `{code}` {severity}s like these are not shown (--output json lists every one)",
                style.severity(Severity::Note),
                thousands(n - TEXT_PER_CHECK),
            );
        }
    }
    out
}

/// A diagnostic as a JSON object with snake_case keys.
pub fn json_diagnostic(d: &Diagnostic) -> serde_json::Value {
    serde_json::to_value(d).expect("diagnostics serialise")
}

use crate::diag::escape_markup as xml_escape;

/// JUnit XML: one test case per file with findings (and one per clean file),
/// failing when the file has errors.
pub fn junit(suite: &str, files: &[String], diags: &[Diagnostic], strict: bool) -> String {
    let mut names: Vec<&str> = files.iter().map(String::as_str).collect();
    for d in diags {
        let f = if d.file.is_empty() {
            "(repository)"
        } else {
            d.file.as_str()
        };
        if !names.contains(&f) {
            names.push(f);
        }
    }
    let fails = |s: Severity| s == Severity::Error || (strict && s == Severity::Warning);
    let mut cases = String::new();
    let mut failures = 0;
    for name in &names {
        let mine: Vec<&Diagnostic> = diags
            .iter()
            .filter(|d| {
                let f = if d.file.is_empty() {
                    "(repository)"
                } else {
                    d.file.as_str()
                };
                f == *name && d.severity != Severity::Note
            })
            .collect();
        let _ = write!(
            cases,
            "    <testcase classname=\"dovetail.validate\" name=\"{}\">",
            xml_escape(name)
        );
        let failing: Vec<&&Diagnostic> = mine.iter().filter(|d| fails(d.severity)).collect();
        if !failing.is_empty() {
            failures += 1;
            let body: String = mine.iter().map(|d| format!("{d}\n")).collect();
            let _ = write!(
                cases,
                "\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    ",
                xml_escape(&failing[0].message),
                failing[0].code,
                xml_escape(&body)
            );
        } else if !mine.is_empty() {
            let body: String = mine.iter().map(|d| format!("{d}\n")).collect();
            let _ = write!(
                cases,
                "\n      <system-out>{}</system-out>\n    ",
                xml_escape(&body)
            );
        }
        cases.push_str("</testcase>\n");
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\">\n{cases}  </testsuite>\n</testsuites>\n",
        xml_escape(suite),
        names.len()
    )
}

fn gh_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

fn gh_property(s: &str) -> String {
    gh_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// GitHub Actions workflow commands: `::error file=..,line=..,col=..::msg`.
pub fn github(diags: &[Diagnostic]) -> String {
    let mut out = String::new();
    for d in diags {
        let cmd = match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "notice",
        };
        let mut props = Vec::new();
        if !d.file.is_empty() {
            props.push(format!("file={}", gh_property(&d.file)));
            if d.line > 0 {
                props.push(format!("line={}", d.line));
                props.push(format!("col={}", d.column));
            }
        }
        props.push(format!(
            "title={}",
            gh_property(&format!("dovetail {}", d.code))
        ));
        let mut msg = String::new();
        if let Some(o) = &d.object {
            let _ = write!(msg, "{o}: ");
        }
        if !d.path.is_root() {
            let _ = write!(msg, "{}: ", d.path);
        }
        msg.push_str(&d.message);
        if let Some(h) = &d.hint {
            let _ = write!(msg, "\nhint: {h}");
        }
        let _ = writeln!(out, "::{cmd} {}::{}", props.join(","), gh_data(&msg));
    }
    out
}

/// SARIF 2.1.0 for code-scanning uploads.
pub fn sarif(diags: &[Diagnostic]) -> serde_json::Value {
    let mut rules: Vec<&str> = diags.iter().map(|d| d.code).collect();
    rules.sort_unstable();
    rules.dedup();
    let results: Vec<serde_json::Value> = diags
        .iter()
        .map(|d| {
            let level = match d.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Note => "note",
            };
            let mut text = String::new();
            if let Some(o) = &d.object {
                let _ = write!(text, "{o}: ");
            }
            if !d.path.is_root() {
                let _ = write!(text, "{}: ", d.path);
            }
            text.push_str(&d.message);
            if let Some(h) = &d.hint {
                let _ = write!(text, " (hint: {h})");
            }
            let mut result = json!({
                "ruleId": d.code,
                "level": level,
                "message": { "text": text },
            });
            if !d.file.is_empty() {
                let mut physical = json!({ "artifactLocation": { "uri": d.file } });
                if d.line > 0 {
                    physical["region"] =
                        json!({ "startLine": d.line, "startColumn": d.column.max(1) });
                }
                result["locations"] = json!([{ "physicalLocation": physical }]);
            }
            result
        })
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "dovetail",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules.iter().map(|r| json!({ "id": r })).collect::<Vec<_>>(),
            }},
            "results": results,
        }],
    })
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A Markdown table for PR comments.
pub fn markdown(title: &str, diags: &[Diagnostic]) -> String {
    let mut out = format!("### {title}\n\n");
    if diags.is_empty() {
        out.push_str("No problems found.\n");
        return out;
    }
    out.push_str("| Severity | Location | Object | Path | Message |\n|---|---|---|---|---|\n");
    for d in diags {
        let loc = if d.line > 0 {
            format!("{}:{}:{}", d.file, d.line, d.column)
        } else {
            d.file.clone()
        };
        let mut msg = d.message.clone();
        if let Some(h) = &d.hint {
            let _ = write!(msg, " (hint: {h})");
        }
        let _ = writeln!(
            out,
            "| {} | `{}` | {} | `{}` | {} |",
            d.severity,
            md_cell(&loc),
            md_cell(d.object.as_deref().unwrap_or("")),
            md_cell(&d.path.to_string()),
            md_cell(&msg)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::{JsonPath, Pos};

    fn sample() -> Vec<Diagnostic> {
        vec![
            Diagnostic::error("cel", "bad, value: 100%")
                .in_file("pools/a,b.yaml")
                .at(Pos { line: 3, column: 5 })
                .with_object("NodePool/a")
                .with_path(JsonPath::parse("spec.weight")),
            Diagnostic::warning("no-limits", "no limits").with_hint("set them"),
        ]
    }

    #[test]
    fn github_escapes_properties_and_data() {
        let out = github(&sample());
        let first = out.lines().next().unwrap();
        assert_eq!(
            first,
            "::error file=pools/a%2Cb.yaml,line=3,col=5,title=dovetail cel::NodePool/a: spec.weight: bad, value: 100%25"
        );
        assert!(
            out.lines()
                .nth(1)
                .unwrap()
                .starts_with("::warning title=dovetail no-limits::no limits%0Ahint: set them")
        );
    }

    #[test]
    fn junit_fails_files_with_errors_only() {
        let xml = junit("dovetail validate", &["ok.yaml".into()], &sample(), false);
        assert!(xml.contains("tests=\"3\" failures=\"1\""), "{xml}");
        assert!(xml.contains("<failure message=\"bad, value: 100%\" type=\"cel\">"));
        let strict = junit("dovetail validate", &[], &sample(), true);
        assert!(strict.contains("failures=\"2\""), "{strict}");
    }

    #[test]
    fn sarif_has_locations_and_levels() {
        let s = sarif(&sample());
        let results = &s["runs"][0]["results"];
        assert_eq!(results[0]["level"], "error");
        assert_eq!(
            results[0]["locations"][0]["physicalLocation"]["region"]["startLine"],
            3
        );
        assert!(results[1].get("locations").is_none());
    }

    #[test]
    fn text_without_color_is_plain() {
        let t = text(&sample(), Style { color: false });
        assert_eq!(
            t,
            "pools/a,b.yaml:3:5: error: NodePool/a: spec.weight: bad, value: 100%\nwarning: no limits\n  hint: set them\n"
        );
    }
}
