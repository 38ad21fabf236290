//! `dovetail validate` and the served API's admission against the real
//! API server's, document by document: the validate fixtures, the example
//! repository and a sample of the conformance suite's generated NodePools
//! and EC2NodeClasses (its CEL cases).
//!
//! - The real verdict of a file is `kubectl apply --dry-run=server
//!   --validate=strict -f FILE` on the testbed. Per document it is the same
//!   request made directly (`POST ...?dryRun=All&fieldValidation=Strict`),
//!   whose `Status` names the fields; after a strict decoding error the
//!   document is sent once more with `fieldValidation=Ignore`, as the rest
//!   of its errors are only reported then.
//! - dovetail's verdict is the errors of `dovetail validate DIR --worktree`
//!   (for a generated case, of `validate` on the document alone), and the
//!   served API's is its answer to the same two requests.
//! - A refusal agrees when each field the API server names is named by the
//!   other side at or under it, and the other way round; a CEL rule's
//!   refusal must also carry the rule's message.
//!
//! What is left is explained by [`STRICTER`] (checks dovetail makes by
//! design beyond an API server, by diagnostic code) or by an entry of
//! [`ALLOWED`]; anything else fails, and so does an entry nothing needs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::http::{Api, Reply};
use super::{ServedApi, relative, testbed_with_crds};
use crate::support::{dovetail, root};

/// Diagnostic codes of checks `validate` makes beyond the API server by
/// design, with the reason.
const STRICTER: &[(&str, &str)] = &[
    (
        "nodeclassref",
        "cross-object: a NodePool's nodeClassRef must name an EC2NodeClass of the repository (the API server does not resolve references)",
    ),
    (
        "duplicate",
        "cross-object: two objects of one kind and name in a repository (each alone is a valid create)",
    ),
    (
        "empty-repository",
        "repository-level: a repository without a NodePool or EC2NodeClass (the API server sees objects, not repositories)",
    ),
    (
        "taint",
        "Karpenter's runtime validation of taints (syntax and duplicates), which the CRD does not express",
    ),
    (
        "schedule",
        "Karpenter's runtime validation: the budget's cron schedule must parse (the CRD's pattern only counts five fields)",
    ),
    (
        "requirement-value",
        "Karpenter's runtime validation of well-known requirement values",
    ),
    (
        "yaml-duplicate-key",
        "a YAML mapping with a key twice: kubectl keeps the last value silently, dovetail refuses the file as YAML 1.2 does",
    ),
];

/// Refusals both sides make at the same field in other words: the API
/// server's message (a fragment of it), the other side's, and why.
const REWORDED: &[(&str, &str, &str)] = &[
    (
        "should be a non-negative integer",
        "is less than the minimum of 0",
        "spec.replicas below 0: the API server's own check of a scale subresource's replicas, beside the schema's minimum that dovetail reports",
    ),
    (
        "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
        "capacityReservationSelectorTerms cannot be an empty list",
        "an empty capacityReservationSelectorTerms: the CRD's rule holds vacuously and says 'id' is mutually exclusive; dovetail says what is wrong",
    ),
];

/// One difference left, with its reason: where (`file` relative to the
/// crate root, the document's index, or `None` for the file), which side
/// (`validate` or `served`), and the field (as normalised here: keys in
/// dots, indices in brackets).
struct Allowed {
    file: &'static str,
    doc: Option<usize>,
    side: &'static str,
    field: &'static str,
    reason: &'static str,
}

/// The verdict on an object of a kind or version the reference CRDs do
/// not serve depends on the CRDs of the cluster it is applied to.
const OTHER_CRDS: &str = "an object of another API group or of a version the v1.14.1 CRD does not serve: kubectl finds no such kind on a cluster with only dovetail's CRDs, while dovetail warns (an error under --strict), since a cluster may serve it from another CRD (issue 28)";

const ALLOWED: &[Allowed] = &[
    Allowed {
        file: "tests/fixtures/validate/karpenter-v1.14-invalid/kinds.yaml",
        doc: Some(3),
        side: "validate",
        field: "",
        reason: OTHER_CRDS,
    },
    Allowed {
        file: "tests/fixtures/validate/karpenter-v1.14-invalid/kinds.yaml",
        doc: Some(4),
        side: "validate",
        field: "",
        reason: OTHER_CRDS,
    },
    Allowed {
        file: "tests/fixtures/validate/karpenter-v1.14-wrong-group/classes.yaml",
        doc: Some(2),
        side: "validate",
        field: "",
        reason: OTHER_CRDS,
    },
];

/// A refusal: the field it names and what it says.
#[derive(Debug, Clone)]
struct Cause {
    field: String,
    reason: String,
    message: String,
    /// A CEL rule's refusal (its message is the rule's): the other side
    /// must say it too.
    rule: bool,
}

/// An API server's answer to one document.
#[derive(Debug, Clone)]
enum Verdict {
    Accepted,
    /// Refused with `code`; `withheld` when the server said that some
    /// CEL rules were not checked because of structural errors.
    Refused {
        code: u16,
        causes: Vec<Cause>,
        withheld: bool,
    },
}

impl Verdict {
    fn refused(&self) -> bool {
        matches!(self, Verdict::Refused { .. })
    }

    fn causes(&self) -> &[Cause] {
        match self {
            Verdict::Accepted => &[],
            Verdict::Refused { causes, .. } => causes,
        }
    }

    fn withheld(&self) -> bool {
        matches!(self, Verdict::Refused { withheld: true, .. })
    }

    fn summary(&self) -> String {
        match self {
            Verdict::Accepted => "accepted".into(),
            Verdict::Refused { code, causes, .. } => format!(
                "{code} [{}]",
                causes
                    .iter()
                    .map(|c| format!("{}: {}", c.field, c.message))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
    }
}

/// Normalises a field path: map keys in brackets (`labels["a/b"]`,
/// `labels[a/b]`) become dotted keys; list indices stay in brackets.
fn normalise(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find(']') else {
            break;
        };
        let inner = &rest[open + 1..open + close];
        if !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&rest[open..=open + close]);
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(inner.trim_matches('"'));
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out.trim_start_matches('.').to_string()
}

/// Whether `inner` is `outer` or a field under it.
fn at_or_under(inner: &str, outer: &str) -> bool {
    outer.is_empty()
        || inner == outer
        || inner
            .strip_prefix(outer)
            .is_some_and(|r| r.starts_with('.') || r.starts_with('['))
}

/// Whether `other` (dovetail's or the served API's) names the same
/// refusal as the API server's `real`.
fn same(real: &Cause, other: &Cause) -> bool {
    at_or_under(&other.field, &real.field)
        && (!real.rule || real.message.contains(other.message.as_str()))
}

/// The reason `other` says what `real` says in other words, if it does.
fn reworded(real: &Cause, other: &Cause) -> Option<&'static str> {
    if !at_or_under(&other.field, &real.field) {
        return None;
    }
    REWORDED
        .iter()
        .find(|(r, o, _)| real.message.contains(r) && other.message.contains(o))
        .map(|(_, _, why)| *why)
}

/// kubectl's resource mapping, from the server's discovery: the plural and
/// scope of a kind, or `None` ("no matches for kind").
struct Discovery<'a> {
    api: &'a Api,
    groups: BTreeMap<String, Vec<Value>>,
}

impl<'a> Discovery<'a> {
    fn new(api: &'a Api) -> Self {
        Discovery {
            api,
            groups: BTreeMap::new(),
        }
    }

    fn resource(&mut self, api_version: &str, kind: &str) -> Option<(String, bool)> {
        let api = self.api;
        let resources = self
            .groups
            .entry(api_version.to_string())
            .or_insert_with(|| {
                let reply = api.get(&base_path(api_version));
                if reply.status != 200 {
                    return Vec::new();
                }
                reply.json()["resources"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            });
        resources
            .iter()
            .find(|r| r["kind"] == kind && !r["name"].as_str().unwrap_or("/").contains('/'))
            .map(|r| {
                (
                    r["name"].as_str().unwrap_or_default().to_string(),
                    r["namespaced"] == true,
                )
            })
    }
}

fn base_path(api_version: &str) -> String {
    if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    }
}

/// The unknown and duplicate fields a strict decoding error lists.
fn strict_causes(message: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    for (marker, reason) in [
        ("unknown field \"", "FieldValueUnknown"),
        ("duplicate field \"", "FieldValueDuplicate"),
    ] {
        let mut rest = message;
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let end = rest.find('"').unwrap_or(rest.len());
            out.push(Cause {
                field: normalise(&rest[..end]),
                reason: reason.into(),
                message: format!("unknown field {:?}", &rest[..end]),
                rule: false,
            });
            rest = &rest[end..];
        }
    }
    out
}

/// The causes of a refusal, and whether some rules were withheld.
fn causes_of(reply: &Reply) -> (Vec<Cause>, bool) {
    let body = reply.json();
    let mut withheld = false;
    let mut out = Vec::new();
    for c in body["details"]["causes"].as_array().into_iter().flatten() {
        let field = c["field"].as_str().unwrap_or_default();
        let message = c["message"].as_str().unwrap_or_default().to_string();
        if message.contains("some validation rules were not checked") {
            withheld = true;
            continue;
        }
        let reason = c["reason"].as_str().unwrap_or_default().to_string();
        let field = if field == "<nil>" { "" } else { field };
        let rule =
            reason == "FieldValueInvalid" && !field.is_empty() && !message.contains(" in body ");
        // A structural error of an int-or-string field comes without its
        // field, which its message names.
        let field = if field.is_empty() {
            field_in(&message).unwrap_or_default()
        } else {
            field.to_string()
        };
        out.push(Cause {
            field: normalise(&field),
            reason,
            message,
            rule,
        });
    }
    if out.is_empty() {
        out.push(Cause {
            field: String::new(),
            reason: body["reason"].as_str().unwrap_or_default().to_string(),
            message: body["message"]
                .as_str()
                .map_or_else(|| reply.text(), String::from),
            rule: false,
        });
    }
    (out, withheld)
}

/// The field a message names: `"spec.limits.memory" must validate ...` or
/// `... in spec.limits.memory`.
fn field_in(message: &str) -> Option<String> {
    if let Some(start) = message.find("\"spec") {
        let rest = &message[start + 1..];
        return rest.find('"').map(|end| rest[..end].to_string());
    }
    let at = message.find(" in spec")?;
    let rest = &message[at + 4..];
    Some(
        rest.split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string(),
    )
}

/// The server's verdict on creating `doc`, as kubectl would send it.
fn admit(api: &Api, discovery: &mut Discovery, doc: &Value) -> Verdict {
    let unmapped = |message: String| Verdict::Refused {
        code: 0,
        causes: vec![Cause {
            field: String::new(),
            reason: "NoKindMatch".into(),
            message,
            rule: false,
        }],
        withheld: false,
    };
    let (Some(api_version), Some(kind)) = (
        doc.get("apiVersion").and_then(Value::as_str),
        doc.get("kind").and_then(Value::as_str),
    ) else {
        return unmapped("invalid object to validate".into());
    };
    let Some((plural, namespaced)) = discovery.resource(api_version, kind) else {
        return unmapped(format!(
            "no matches for kind {kind:?} in version {api_version:?}"
        ));
    };
    let base = base_path(api_version);
    let path = if namespaced {
        let ns = doc
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        format!("{base}/namespaces/{ns}/{plural}")
    } else {
        format!("{base}/{plural}")
    };
    let strict = api.json(
        "POST",
        &format!("{path}?dryRun=All&fieldValidation=Strict"),
        doc,
    );
    match strict.status {
        200 | 201 => Verdict::Accepted,
        400 if strict.text().contains("strict decoding error") => {
            let mut causes = strict_causes(strict.json()["message"].as_str().unwrap_or_default());
            let rest = api.json(
                "POST",
                &format!("{path}?dryRun=All&fieldValidation=Ignore"),
                doc,
            );
            let mut withheld = false;
            if !matches!(rest.status, 200 | 201) {
                let (more, w) = causes_of(&rest);
                causes.extend(more);
                withheld = w;
            }
            Verdict::Refused {
                code: 400,
                causes,
                withheld,
            }
        }
        code => {
            let (causes, withheld) = causes_of(&strict);
            Verdict::Refused {
                code,
                causes,
                withheld,
            }
        }
    }
}

/// One of dovetail's error diagnostics, as a cause.
#[derive(Debug, Clone)]
struct Finding {
    code: String,
    cause: Cause,
}

fn finding(d: &Value) -> Finding {
    let path = d["path"].as_str().unwrap_or_default();
    let message = d["message"].as_str().unwrap_or_default();
    // "missing required field `x`" is reported at the parent.
    let field = match message
        .strip_prefix("missing required field `")
        .and_then(|m| m.strip_suffix('`'))
    {
        Some(x) if path.is_empty() => x.to_string(),
        Some(x) => format!("{path}.{x}"),
        None => path.to_string(),
    };
    Finding {
        code: d["code"].as_str().unwrap_or_default().to_string(),
        cause: Cause {
            field: normalise(&field),
            reason: d["code"].as_str().unwrap_or_default().to_string(),
            message: message.to_string(),
            rule: false,
        },
    }
}

/// A document of a file: its index among the file's non-empty documents,
/// its lines, and its JSON (`None` where the file does not parse).
struct Doc {
    index: usize,
    first_line: usize,
    end_line: usize,
    json: Value,
}

/// Splits a file into documents at `---` lines and parses each as kubectl
/// does (a repeated key keeps its last value). `None`: the file is not
/// UTF-8 YAML that parses, so only its file-level verdict is compared.
fn documents(bytes: &[u8]) -> Option<Vec<Doc>> {
    let text = std::str::from_utf8(bytes).ok()?;
    if text.contains('\0') {
        return None;
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut seps: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| *l == &"---" || l.starts_with("--- ") || l.starts_with("---\t"))
        .map(|(i, _)| i + 1)
        .collect();
    seps.insert(0, 0);
    seps.push(lines.len() + 1);
    let options = serde_saphyr::options! {
        duplicate_keys: serde_saphyr::options::DuplicateKeyPolicy::LastWins,
    };
    let mut docs = Vec::new();
    for w in seps.windows(2) {
        let (sep, next) = (w[0], w[1]);
        let body = lines[sep..next - 1].join("\n");
        let blank = body
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
        if blank {
            continue;
        }
        let json: Value = serde_saphyr::from_str_with_options(&body, options.clone()).ok()?;
        docs.push(Doc {
            index: docs.len(),
            first_line: sep.max(1),
            end_line: next,
            json,
        });
    }
    Some(docs)
}

/// How one comparison came out.
#[derive(Default)]
struct Tally {
    agree: usize,
    /// Rows that differ only in explained ways.
    explained_rows: usize,
    /// The explained differences, by reason (a row may have several).
    explained: BTreeMap<String, usize>,
    /// Unexplained differences.
    failures: Vec<String>,
    /// ALLOWED entries that were needed.
    used: BTreeSet<usize>,
    rows: usize,
}

/// Compares one document's verdicts: the API server's `real` and the other
/// side's `other` (its findings, with diagnostic codes where the side is
/// `validate`). Returns the explanations used; failures go to the tally.
#[allow(clippy::too_many_arguments)]
fn compare(
    tally: &mut Tally,
    side: &str,
    file: &str,
    doc: Option<usize>,
    real: &Verdict,
    other: &[Finding],
    other_summary: &str,
    validate_findings: &[Finding],
) {
    tally.rows += 1;
    let mut reasons: BTreeSet<String> = BTreeSet::new();
    let mut failures = Vec::new();
    let allowed = |field: &str| -> Option<usize> {
        ALLOWED.iter().position(|a| {
            a.side == side && file.ends_with(a.file) && a.doc == doc && a.field == field
        })
    };
    let mut used = Vec::new();
    for c in real.causes() {
        if other.iter().any(|f| same(c, &f.cause)) {
            continue;
        }
        if let Some(why) = other.iter().find_map(|f| reworded(c, &f.cause)) {
            reasons.insert(format!("same field, other words: {why}"));
            continue;
        }
        match allowed(&c.field) {
            Some(i) => {
                used.push(i);
                reasons.insert(ALLOWED[i].reason.to_string());
            }
            None => failures.push(format!(
                "the API server refuses `{}` ({}: {}); {side} does not",
                c.field, c.reason, c.message
            )),
        }
    }
    for f in other {
        if real
            .causes()
            .iter()
            .any(|c| same(c, &f.cause) || reworded(c, &f.cause).is_some())
        {
            continue;
        }
        // The served admission runs validate's checks: its refusal has the
        // code of validate's finding of the same field and message.
        let code = match side {
            "validate" => Some(f.code.as_str()),
            _ => validate_findings
                .iter()
                .find(|v| v.cause.field == f.cause.field && v.cause.message == f.cause.message)
                .map(|v| v.code.as_str()),
        };
        if let Some((_, why)) = STRICTER.iter().find(|(c, _)| Some(*c) == code) {
            reasons.insert(format!("stricter, by design: {why}"));
            continue;
        }
        if f.code == "cel" && real.withheld() {
            reasons.insert(
                "stricter, by design: dovetail checks the CEL rules the API server withholds after a structural error"
                    .into(),
            );
            continue;
        }
        match allowed(&f.cause.field) {
            Some(i) => {
                used.push(i);
                reasons.insert(ALLOWED[i].reason.to_string());
            }
            None => failures.push(format!(
                "{side} refuses `{}` ({}: {}); the API server does not",
                f.cause.field, f.code, f.cause.message
            )),
        }
    }
    let other_refused = !other.is_empty();
    if real.refused() != other_refused && failures.is_empty() && reasons.is_empty() {
        failures.push("the verdicts differ".into());
    }
    let at = match doc {
        Some(d) => format!("{file} document {d}"),
        None => file.to_string(),
    };
    if !failures.is_empty() {
        tally.failures.push(format!(
            "{at} ({side}):\n    {}\n    API server: {}\n    {side}: {other_summary}",
            failures.join("\n    "),
            real.summary()
        ));
    } else if reasons.is_empty() {
        tally.agree += 1;
    } else {
        tally.explained_rows += 1;
        for r in reasons {
            *tally.explained.entry(r).or_default() += 1;
        }
    }
    tally.used.extend(used);
}

/// The repositories whose files are compared: each validate fixture and
/// the example repository.
fn repositories() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join("tests/fixtures/validate"))
        .expect("the validate fixtures")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out.push(root().join("examples-repo"));
    out
}

/// Every file of a repository (symlinks included, unfollowed), sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("a directory") {
            let p = e.expect("an entry").path();
            let meta = std::fs::symlink_metadata(&p).expect("metadata");
            if meta.is_dir() {
                stack.push(p);
            } else if p
                .extension()
                .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Every namespace the documents of the repositories name: created on the
/// testbed first, as the namespaces of a real cluster exist.
fn namespaces(docs: &[Value]) -> BTreeSet<String> {
    docs.iter()
        .filter_map(|d| d.pointer("/metadata/namespace").and_then(Value::as_str))
        .map(String::from)
        .collect()
}

fn summary_of(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "accepted".into();
    }
    format!(
        "refused [{}]",
        findings
            .iter()
            .map(|f| format!("{}: {} ({})", f.cause.field, f.cause.message, f.code))
            .collect::<Vec<_>>()
            .join("; ")
    )
}

/// The served API's verdict as findings.
fn served_findings(v: &Verdict) -> Vec<Finding> {
    v.causes()
        .iter()
        .map(|c| Finding {
            code: c.reason.clone(),
            cause: c.clone(),
        })
        .collect()
}

/// What `validate` says of one generated document, alone, with
/// `--allow-external-nodeclass`: its errors.
fn validate_alone(doc: &Value) -> Vec<Finding> {
    use dovetail::config::load::parse_one;
    use dovetail::config::validate::{self, Options};
    use dovetail::config::yaml::Limits;
    let text = serde_json::to_string_pretty(doc).expect("JSON");
    let loaded = parse_one("generated.yaml", text.as_bytes(), &Limits::default());
    let report = validate::validate(
        &loaded,
        &Options {
            allow_external_nodeclass: true,
            ..Options::default()
        },
    );
    let diags = serde_json::to_value(&report.diagnostics).expect("diagnostics");
    diags
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["severity"] == "error")
        .map(finding)
        .collect()
}

/// The generated cases: the conformance suite's NodePools and
/// EC2NodeClasses, from a deterministic runner.
fn generated(n: usize) -> Vec<(String, Value)> {
    use crate::conformance::{apply_nc, apply_np, base_ec2nodeclass, base_nodepool};
    use crate::conformance::{nc_mutation, np_mutation};
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut out = Vec::new();
    for i in 0..n {
        let ms = prop::collection::vec(np_mutation(), 0..3)
            .new_tree(&mut runner)
            .expect("a case")
            .current();
        let mut doc = base_nodepool();
        for m in &ms {
            apply_np(&mut doc, m);
        }
        out.push((format!("generated NodePool {i}"), doc));
        let ms = prop::collection::vec(nc_mutation(), 0..3)
            .new_tree(&mut runner)
            .expect("a case")
            .current();
        let mut doc = base_ec2nodeclass();
        for m in &ms {
            apply_nc(&mut doc, m);
        }
        out.push((format!("generated EC2NodeClass {i}"), doc));
    }
    out
}

/// Issue 37, item 6, parts 1 and 2: `validate`'s and the served API's
/// verdicts and fields against the API server's, on every document of the
/// validate fixtures and the example repository, and on 150 generated
/// cases of each kind.
#[test]
fn validate_and_the_served_admission_agree_with_the_api_server() {
    let (tb, real) = testbed_with_crds();
    let served = ServedApi::start();
    let mut real_discovery = Discovery::new(&real);
    let mut served_discovery = Discovery::new(&served.api);

    // Every file, with its documents where it parses.
    let mut repos = Vec::new();
    for repo in repositories() {
        let files: Vec<(PathBuf, Option<Vec<Doc>>)> = files(&repo)
            .into_iter()
            .map(|f| {
                let symlink = std::fs::symlink_metadata(&f)
                    .expect("metadata")
                    .file_type()
                    .is_symlink();
                let docs = if symlink {
                    None
                } else {
                    documents(&std::fs::read(&f).expect("a fixture"))
                };
                (f, docs)
            })
            .collect();
        repos.push((repo, files));
    }
    let all: Vec<Value> = repos
        .iter()
        .flat_map(|(_, fs)| fs.iter().flat_map(|(_, d)| d.iter().flatten()))
        .map(|d| d.json.clone())
        .collect();
    for ns in namespaces(&all) {
        tb.kubectl_ok(&["create", "namespace", &ns]);
        let created = served.api.json(
            "POST",
            "/api/v1/namespaces",
            &serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
        assert_eq!(created.status, 201, "{}", created.text());
    }

    let mut validate_tally = Tally::default();
    let mut served_tally = Tally::default();
    let mut kubectl_mismatches = Vec::new();
    for (repo, files) in &repos {
        let dir = relative(repo);
        let out = dovetail(&["validate", &dir, "--worktree", "--output", "json"]);
        assert!(out.code <= 1, "validate {dir}: {}", out.stderr);
        let report: Value = serde_json::from_str(&out.stdout).expect("validate's JSON");
        let errors: Vec<&Value> = report["diagnostics"]
            .as_array()
            .expect("diagnostics")
            .iter()
            .filter(|d| d["severity"] == "error")
            .collect();
        // Repository-level errors: no document, and nothing the API server
        // would judge.
        let repo_level: Vec<Finding> = errors
            .iter()
            .filter(|d| d["file"].as_str().unwrap_or_default().is_empty())
            .map(|d| finding(d))
            .collect();
        if !repo_level.is_empty() {
            compare(
                &mut validate_tally,
                "validate",
                &dir,
                None,
                &Verdict::Accepted,
                &repo_level,
                &summary_of(&repo_level),
                &[],
            );
        }
        for (path, docs) in files {
            let file = relative(path);
            let in_file: Vec<&&Value> = errors.iter().filter(|d| d["file"] == file).collect();
            let kubectl = tb.kubectl(&[
                "apply",
                "--dry-run=server",
                "--validate=strict",
                "-f",
                path.to_str().expect("UTF-8 path"),
            ]);
            let kubectl_refused = !kubectl.status.success();
            let Some(docs) = docs else {
                // The file-level verdicts only.
                let real = if kubectl_refused {
                    Verdict::Refused {
                        code: 0,
                        causes: vec![Cause {
                            field: String::new(),
                            reason: "kubectl".into(),
                            message: String::from_utf8_lossy(&kubectl.stderr).trim().to_string(),
                            rule: false,
                        }],
                        withheld: false,
                    }
                } else {
                    Verdict::Accepted
                };
                let ours: Vec<Finding> = in_file.iter().map(|d| finding(d)).collect();
                compare(
                    &mut validate_tally,
                    "validate",
                    &file,
                    None,
                    &real,
                    &ours,
                    &summary_of(&ours),
                    &[],
                );
                continue;
            };
            let mut any_refused = false;
            for doc in docs {
                let real_verdict = admit(&real, &mut real_discovery, &doc.json);
                any_refused |= real_verdict.refused();
                let ours: Vec<Finding> = in_file
                    .iter()
                    .filter(|d| {
                        let line = d["line"].as_u64().unwrap_or(0) as usize;
                        (doc.first_line..doc.end_line).contains(&line)
                            || (line == 0 && doc.index == 0)
                    })
                    .map(|d| finding(d))
                    .collect();
                compare(
                    &mut validate_tally,
                    "validate",
                    &file,
                    Some(doc.index),
                    &real_verdict,
                    &ours,
                    &summary_of(&ours),
                    &[],
                );
                let served_verdict = admit(&served.api, &mut served_discovery, &doc.json);
                let served_as = served_findings(&served_verdict);
                compare(
                    &mut served_tally,
                    "served",
                    &file,
                    Some(doc.index),
                    &real_verdict,
                    &served_as,
                    &served_verdict.summary(),
                    &ours,
                );
            }
            if any_refused != kubectl_refused {
                kubectl_mismatches.push(format!(
                    "{file}: kubectl {} it, the requests {} ({})",
                    if kubectl_refused {
                        "refuses"
                    } else {
                        "accepts"
                    },
                    if any_refused {
                        "refuse a document"
                    } else {
                        "accept every document"
                    },
                    String::from_utf8_lossy(&kubectl.stderr).trim()
                ));
            }
        }
    }

    // Karpenter's own cases: the API server with its CRDs must give the
    // verdict its test expects (the port is faithful), and dovetail the
    // API server's.
    let mut unfaithful = Vec::new();
    let cases: Vec<(String, Value)> = super::karpenter_cases::cases()
        .into_iter()
        .map(|(name, doc, succeeds)| {
            let verdict = admit(&real, &mut real_discovery, &doc);
            if verdict.refused() == succeeds {
                unfaithful.push(format!("{name}: the API server says {}", verdict.summary()));
            }
            (name, doc)
        })
        .collect();
    assert!(unfaithful.is_empty(), "{}", unfaithful.join("\n"));
    eprintln!(
        "{} of Karpenter v1.14.1's CEL cases: the API server's verdict is the one its test expects",
        cases.len()
    );
    for (name, doc) in cases.into_iter().chain(generated(150)) {
        let real_verdict = admit(&real, &mut real_discovery, &doc);
        let ours = validate_alone(&doc);
        compare(
            &mut validate_tally,
            "validate",
            &name,
            Some(0),
            &real_verdict,
            &ours,
            &format!("{} for {doc}", summary_of(&ours)),
            &[],
        );
        let served_verdict = admit(&served.api, &mut served_discovery, &doc);
        compare(
            &mut served_tally,
            "served",
            &name,
            Some(0),
            &real_verdict,
            &served_findings(&served_verdict),
            &format!("{} for {doc}", served_verdict.summary()),
            &ours,
        );
    }

    let mut problems = kubectl_mismatches;
    let mut used = validate_tally.used.clone();
    used.extend(served_tally.used.iter().copied());
    for (i, a) in ALLOWED.iter().enumerate() {
        if !used.contains(&i) {
            problems.push(format!(
                "allow-list entry no longer needed: {} {:?} ({}) `{}`",
                a.file, a.doc, a.side, a.field
            ));
        }
    }
    for (name, t) in [("validate", &validate_tally), ("served", &served_tally)] {
        eprintln!(
            "{name} vs the API server: {} documents, {} agree, {} differ with a reason",
            t.rows, t.agree, t.explained_rows
        );
        for (reason, n) in &t.explained {
            eprintln!("    {n} × {reason}");
        }
    }
    problems.extend(validate_tally.failures);
    problems.extend(served_tally.failures);
    assert!(
        problems.is_empty(),
        "{} unexplained differences:\n{}\n\nserved API log:\n{}",
        problems.len(),
        problems.join("\n"),
        served.log()
    );
}

#[test]
fn paths_normalise_and_nest() {
    assert_eq!(
        normalise("spec.template.metadata.labels[\"karpenter.sh/team\"]"),
        "spec.template.metadata.labels.karpenter.sh/team"
    );
    assert_eq!(
        normalise("spec.tags[kubernetes.io/cluster/x]"),
        "spec.tags.kubernetes.io/cluster/x"
    );
    assert_eq!(
        normalise("spec.requirements[0].key"),
        "spec.requirements[0].key"
    );
    assert_eq!(normalise(".spec.foo"), "spec.foo");
    assert!(at_or_under("spec.a[0].b", "spec.a"));
    assert!(at_or_under("spec.a", "spec.a"));
    assert!(!at_or_under("spec.ab", "spec.a"));
    assert!(at_or_under("spec", ""));
}
