//! `dovetail validate`: every check of a configuration repository.
//!
//! The phases run over all documents in turn, each in parallel across files:
//! 1. conversion of the parsed YAML to JSON values (the loader has parsed it);
//! 2. classification (kind, retired APIs), metadata and the JSON Schema check;
//! 3. the CEL-equivalent rules and the runtime checks;
//! 4. cross-object checks (duplicate names, `nodeClassRef` resolution) and
//!    warnings.
//!
//! Every problem becomes a [`Diagnostic`] at the most specific YAML node.
//!
//! In more detail:
//! - phase 2 gives a retired Karpenter API its migration findings at the
//!   offending fields, warns about a Karpenter kind in the wrong API group,
//!   drops `status` (the API server ignores it), and checks the generated JSON
//!   Schema strictly (unknown fields are errors);
//! - phase 3 is the reference CRDs' CEL rules that do not use `oldSelf`,
//!   checked natively (`rules`), and the reference's runtime checks
//!   (`runtime`: label and taint syntax, restricted domains, well-known
//!   values, durations, schedules);
//! - phase 4 also reports a repository with no NodePool or EC2NodeClass.
//!
//! Each phase is timed (`Report::timings`). A finding carries a JSON path;
//! `config::yaml::Node::locate` maps it to the most specific YAML node that
//! exists. Transition rules (`oldSelf`) need the previous object, so `diff`
//! and sync check them (`transition`), not `validate`. `cli::render` prints
//! the diagnostics.

#[cfg(test)]
mod capacitybuffer_cases;
pub mod catalog;
pub mod kinds;

#[cfg(test)]
mod nodeoverlay_cases;
pub mod rules;
pub mod runtime;
pub mod schema;
pub mod transition;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::api::ApiKind;
use crate::config::load::Loaded;
use crate::config::yaml::{self, YamlDoc};
use crate::diag::{Diagnostic, JsonPath, Pos, Severity};
use kinds::Classified;

/// What `validate` is asked to do beyond the checks it always makes.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Accept a `nodeClassRef` to an EC2NodeClass that is not in the repository.
    pub allow_external_nodeclass: bool,
    /// Prepended to repository-relative paths in diagnostics, so they read as
    /// the user addressed the files (`examples-repo/pools/a.yaml`).
    pub path_prefix: String,
    /// With `--catalog`: warn about NodePools no instance type satisfies.
    pub catalog: Option<std::sync::Arc<Vec<crate::model::InstanceType>>>,
    /// Whether the controller runs with the `StaticCapacity` feature gate:
    /// `Some(false)` reports a NodePool with `spec.replicas` as inactive;
    /// `None` (not known, e.g. `diff`) says nothing about it.
    pub static_capacity: Option<bool>,
    /// Likewise for the `NodeOverlay` gate: `Some(false)` reports
    /// NodeOverlays as not applied.
    pub node_overlay: Option<bool>,
    /// Likewise for the `CapacityBuffer` gate: `Some(false)` reports
    /// CapacityBuffers as not acted on.
    pub capacity_buffer: Option<bool>,
}

/// An object of one of dovetail's kinds found in the repository.
#[derive(Debug, Clone)]
pub struct Object {
    pub kind: ApiKind,
    pub name: String,
    /// Repository-relative file.
    pub file: String,
    /// Index of the document in its file.
    pub index: usize,
    /// Where the document starts.
    pub pos: Pos,
    /// Where `metadata.name` is.
    pub name_pos: Pos,
    pub value: Value,
    /// No error was found in this object itself.
    pub valid: bool,
}

impl Object {
    pub fn display(&self) -> String {
        format!("{}/{}", self.kind.kind(), self.name)
    }

    /// The name sync and diff know it by: `namespace/name` for a
    /// namespaced kind (see [`ApiKind::object_name`]).
    pub fn key(&self) -> String {
        self.kind.object_name(&self.value)
    }
}

/// Wall-clock time of each phase.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Timings {
    #[serde(serialize_with = "secs")]
    pub convert: Duration,
    #[serde(serialize_with = "secs")]
    pub schema: Duration,
    #[serde(serialize_with = "secs")]
    pub rules: Duration,
    #[serde(serialize_with = "secs")]
    pub cross: Duration,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The result of validating a repository.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub diagnostics: Vec<Diagnostic>,
    pub objects: Vec<Object>,
    pub files: usize,
    pub documents: usize,
    pub timings: Timings,
}

impl Report {
    pub fn count(&self, severity: Severity) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == severity)
            .count()
    }

    /// Whether the repository passes: no errors, and no warnings under `strict`.
    pub fn passes(&self, strict: bool) -> bool {
        self.count(Severity::Error) == 0 && !(strict && self.count(Severity::Warning) > 0)
    }

    pub fn objects_of(&self, kind: ApiKind) -> impl Iterator<Item = &Object> {
        self.objects.iter().filter(move |o| o.kind == kind)
    }
}

struct Doc<'a> {
    file: &'a str,
    yaml: &'a YamlDoc,
    /// The document without `status`, if it had one (see [`drop_status`]).
    json: Value,
    /// It had a `status`.
    had_status: bool,
}

/// Removes `status` from an object of a kind with a status subresource
/// (every kind `validate` checks): the API server ignores `status` on
/// create and update of such kinds and never validates it, so an object
/// copied from a cluster or a reference page, status included, is valid.
fn drop_status(json: &mut Value) -> bool {
    let api_version = json.get("apiVersion").and_then(Value::as_str);
    let kind = json.get("kind").and_then(Value::as_str);
    let ours = match (api_version, kind) {
        (Some(a), Some(k)) => ApiKind::ALL.iter().any(|e| {
            e.kind() == k && (e.api_version() == a || e.previous_api_version() == Some(a))
        }),
        _ => false,
    };
    ours && json
        .as_object_mut()
        .is_some_and(|o| o.remove("status").is_some())
}

/// Drops the `null`s the API server drops from an object of one of the
/// served versions before it validates it ([`crate::api::structural`]): a
/// key without a value, or a Go client's nil slice, is as if absent.
fn prune_nulls(json: &mut Value) {
    let api_version = json.get("apiVersion").and_then(Value::as_str);
    let kind = json.get("kind").and_then(Value::as_str);
    let served = ApiKind::ALL
        .into_iter()
        .find(|e| Some(e.kind()) == kind && Some(e.api_version()) == api_version);
    if let Some(served) = served {
        let schema = crate::api::structural::schema(served);
        crate::api::structural::prune_nulls(schema, json);
    }
}

/// The per-document outcome of the schema phase.
struct Classification {
    class: Option<Classified>,
    diagnostics: Vec<Diagnostic>,
}

/// Validates everything the loader read.
pub fn validate(loaded: &Loaded, opts: &Options) -> Report {
    let mut report = Report {
        files: loaded.files.len(),
        diagnostics: loaded.diagnostics.clone(),
        ..Report::default()
    };

    let t = Instant::now();
    let refs: Vec<(&str, &YamlDoc)> = loaded
        .files
        .iter()
        .flat_map(|f| f.docs.iter().map(move |d| (f.path.as_str(), d)))
        .collect();
    let docs: Vec<Doc> = crate::par::map(&refs, |(file, yaml)| {
        let mut json = yaml.root.to_json();
        let had_status = drop_status(&mut json);
        prune_nulls(&mut json);
        Doc {
            file,
            yaml,
            json,
            had_status,
        }
    });
    report.documents = docs.len();
    report.timings.convert = t.elapsed();

    let t = Instant::now();
    let classes: Vec<Classification> = crate::par::map(&docs, classify_and_check_schema);
    report.timings.schema = t.elapsed();

    let t = Instant::now();
    let catalog = opts
        .catalog
        .as_deref()
        .map(|c| (c.as_slice(), catalog::defined_keys(c)));
    let jobs: Vec<(&Doc, &Classification)> = docs.iter().zip(&classes).collect();
    let ruled: Vec<Vec<Diagnostic>> = crate::par::map(&jobs, |(doc, c)| match &c.class {
        Some(Classified::Known(kind) | Classified::Previous(kind)) => {
            check_rules(doc, *kind, catalog.as_ref())
        }
        _ => Vec::new(),
    });
    report.timings.rules = t.elapsed();

    let t = Instant::now();
    for ((doc, class), rule_diags) in docs.into_iter().zip(classes).zip(ruled) {
        let mut diags = class.diagnostics;
        diags.extend(rule_diags);
        let diags = dedupe(diags);
        if let Some(Classified::Known(kind) | Classified::Previous(kind)) = class.class {
            let name = doc
                .json
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let valid = !diags.iter().any(|d| d.severity == Severity::Error);
            report.objects.push(Object {
                kind,
                name,
                file: doc.file.to_string(),
                index: doc.yaml.index,
                pos: doc.yaml.root.pos,
                name_pos: doc.yaml.root.locate(&JsonPath::parse("metadata.name")),
                value: doc.json,
                valid,
            });
        }
        report.diagnostics.extend(diags);
    }
    cross_object(&mut report, loaded, opts);
    if opts.static_capacity == Some(false) {
        inactive_static_pools(&mut report, loaded);
    }
    for (kind, gate) in [
        (ApiKind::NodeOverlay, opts.node_overlay),
        (ApiKind::CapacityBuffer, opts.capacity_buffer),
    ] {
        if gate == Some(false) {
            inactive_gated_kind(&mut report, kind);
        }
    }
    report.timings.cross = t.elapsed();

    if !opts.path_prefix.is_empty() {
        for d in &mut report.diagnostics {
            if !d.file.is_empty() {
                d.file = format!("{}{}", opts.path_prefix, d.file);
            }
        }
    }

    report
        .diagnostics
        .sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    report
}

/// The checks of `validate` on one object, without positions: what an API
/// server's admission runs. Errors only, as `path: message` strings.
///
/// As the API server, it reports the CEL rules and runtime checks beside
/// schema errors, unless a schema error is one that withholds them
/// ([`schema::Finding::blocks_rules`]). Unknown fields are not among the
/// errors: the request's field validation decides about those (refused
/// before admission under `Strict`, dropped otherwise).
pub fn check_object(kind: ApiKind, value: &Value) -> Vec<String> {
    let findings: Vec<schema::Finding> = schema::check(kind, value)
        .into_iter()
        .filter(|f| f.keyword != "additionalProperties")
        .collect();
    let mut out: Vec<String> = findings
        .iter()
        .map(|f| format!("{}: {}", f.path, f.message))
        .collect();
    if findings.iter().any(schema::Finding::blocks_rules) {
        return out;
    }
    out.extend(
        cel_rules(kind, value)
            .into_iter()
            .map(|(path, message)| format!("{path}: {message}")),
    );
    out.extend(
        runtime_findings(kind, value)
            .into_iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| format!("{}: {}", f.path, f.message)),
    );
    out
}

/// The non-transition CEL rules of a kind's CRD on an object whose
/// schema check passed: natively for NodePool and EC2NodeClass (checked
/// against the reference CRDs), by kube-cel on the generated schema for
/// NodeOverlay and CapacityBuffer.
fn cel_rules(kind: ApiKind, value: &Value) -> Vec<(JsonPath, String)> {
    let native = match kind {
        ApiKind::NodePool => rules::nodepool(value),
        ApiKind::EC2NodeClass => rules::ec2nodeclass(value),
        ApiKind::NodeClaim => Vec::new(),
        ApiKind::NodeOverlay | ApiKind::CapacityBuffer => return kube_cel_rules(kind, value),
    };
    native.into_iter().map(|f| (f.path, f.message)).collect()
}

/// The CEL rules of a kind's generated CRD schema, evaluated by kube-cel.
fn kube_cel_rules(kind: ApiKind, value: &Value) -> Vec<(JsonPath, String)> {
    static SCHEMAS: std::sync::OnceLock<Vec<(ApiKind, Value)>> = std::sync::OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        [ApiKind::NodeOverlay, ApiKind::CapacityBuffer]
            .into_iter()
            .map(|k| (k, crate::api::openapi_schema(k)))
            .collect()
    });
    let Some((_, schema)) = schemas.iter().find(|(k, _)| *k == kind) else {
        return Vec::new();
    };
    match kube::core::cel::Validator::new().validate(schema, value, None) {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .iter()
            .map(|e| (JsonPath::parse(&e.field_path), e.message.clone()))
            .collect(),
    }
}

/// The reference's runtime checks of a kind (and dovetail's warnings).
fn runtime_findings(kind: ApiKind, value: &Value) -> Vec<runtime::Finding> {
    match kind {
        ApiKind::NodePool => runtime::nodepool(value),
        ApiKind::NodeOverlay => runtime::nodeoverlay(value),
        _ => Vec::new(),
    }
}

fn locate(doc: &Doc, path: &JsonPath) -> Pos {
    doc.yaml.root.locate(path)
}

fn object_name(json: &Value) -> Option<String> {
    let kind = json.get("kind").and_then(Value::as_str)?;
    let name = json.pointer("/metadata/name").and_then(Value::as_str)?;
    Some(format!("{kind}/{name}"))
}

fn diag_at(doc: &Doc, d: Diagnostic, path: JsonPath) -> Diagnostic {
    let pos = locate(doc, &path);
    let d = d.in_file(doc.file).at(pos).with_path(path);
    match object_name(&doc.json) {
        Some(o) => d.with_object(o),
        None => d,
    }
}

fn classify_and_check_schema(doc: &Doc) -> Classification {
    let mut diagnostics = Vec::new();
    let root = JsonPath::root();
    let what = match &doc.yaml.root.value {
        yaml::Value::Map(_) => None,
        // An empty document (a trailing `---`, or `---` followed only by a
        // comment) is skipped, as kubectl, kubeconform and kubectl-validate
        // skip it.
        yaml::Value::Null => {
            return Classification {
                class: None,
                diagnostics,
            };
        }
        yaml::Value::Seq(_) => Some("a list"),
        yaml::Value::Str(_) => Some("a string"),
        yaml::Value::Number(_) => Some("a number"),
        yaml::Value::Bool(_) => Some("a boolean"),
    };
    if let Some(what) = what {
        let message = format!("document {} is {what}, not an object", doc.yaml.index + 1);
        diagnostics.push(
            Diagnostic::error("document", message)
                .in_file(doc.file)
                .at(doc.yaml.root.pos)
                .with_hint("each document is one Kubernetes object: a mapping with apiVersion, kind and metadata"),
        );
        return Classification {
            class: None,
            diagnostics,
        };
    }
    let class = kinds::classify(&doc.json);
    if doc.had_status {
        diagnostics.push(diag_at(
            doc,
            Diagnostic::note(
                "status",
                "status is not checked: the API server ignores it when the object is created or updated, and the controller writes it",
            ),
            root.key("status"),
        ));
    }
    match &class {
        Classified::Known(kind) | Classified::Previous(kind) => {
            if matches!(class, Classified::Previous(_)) {
                let version = doc
                    .json
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                diagnostics.push(diag_at(
                    doc,
                    Diagnostic::warning(
                        "api-version",
                        format!(
                            "{version} {kind} is not served by the Karpenter v1.14.1 CRD, which serves {}",
                            kind.api_version()
                        ),
                    )
                    .with_hint(format!("set apiVersion: {}", kind.api_version())),
                    root.key("apiVersion"),
                ));
            }
            for f in schema::check(*kind, &doc.json) {
                let mut d = Diagnostic::error("schema", f.message);
                if let Some(h) = f.hint {
                    d = d.with_hint(h);
                }
                diagnostics.push(diag_at(doc, d, f.path).with_keyword(f.keyword));
            }
            metadata_checks(doc, *kind, &mut diagnostics);
        }
        Classified::Retired {
            message,
            hint,
            findings,
        } => {
            diagnostics.push(diag_at(
                doc,
                Diagnostic::error("retired-api", message.clone()).with_hint(hint.clone()),
                root.key("apiVersion"),
            ));
            for (path, msg) in findings {
                diagnostics.push(diag_at(
                    doc,
                    Diagnostic::error("retired-api", msg.clone()),
                    path.clone(),
                ));
            }
        }
        Classified::WrongGroup { message, hint } => diagnostics.push(diag_at(
            doc,
            Diagnostic::warning("api-group", message.clone()).with_hint(hint.clone()),
            root.key("apiVersion"),
        )),
        Classified::UnknownKarpenter { message, hint } => {
            let mut d = Diagnostic::error("unknown-kind", message.clone());
            if let Some(h) = hint {
                d = d.with_hint(h.clone());
            }
            diagnostics.push(diag_at(doc, d, root.key("kind")));
        }
        Classified::Other { api_version, kind } => diagnostics.push(diag_at(
            doc,
            Diagnostic::note(
                "skipped",
                format!("{kind} ({api_version}) is not a dovetail kind; skipped"),
            ),
            root.key("kind"),
        )),
        Classified::NotAnObject { missing } => diagnostics.push(
            diag_at(
                doc,
                Diagnostic::error(
                    "document",
                    format!(
                        "document {} has no `{missing}`: it is not a Kubernetes object",
                        doc.yaml.index + 1
                    ),
                ),
                root,
            )
            .with_hint("add apiVersion and kind, or list the file in .dovetailignore"),
        ),
    }
    Classification {
        class: Some(class),
        diagnostics,
    }
}

fn metadata_checks(doc: &Doc, kind: ApiKind, out: &mut Vec<Diagnostic>) {
    let Some(name) = doc.json.pointer("/metadata/name").and_then(Value::as_str) else {
        return;
    };
    let path = JsonPath::parse("metadata.name");
    if !crate::api::names::is_dns1123_subdomain(name) {
        out.push(diag_at(
            doc,
            Diagnostic::error(
                "name",
                format!("{name:?} is not a valid name: use lower-case letters, digits, '-' and '.', starting and ending with an alphanumeric character"),
            ),
            path,
        ));
    } else if kind == ApiKind::NodePool && name.len() > 63 {
        out.push(diag_at(
            doc,
            Diagnostic::error(
                "name",
                "NodePool names become the value of the karpenter.sh/nodepool node label, so they must be at most 63 characters",
            ),
            path,
        ));
    }
    if !kind.namespaced() && doc.json.pointer("/metadata/namespace").is_some() {
        out.push(diag_at(
            doc,
            Diagnostic::warning(
                "namespace",
                format!("{kind} is cluster-scoped: metadata.namespace is ignored"),
            ),
            JsonPath::parse("metadata.namespace"),
        ));
    }
}

type CatalogRef<'a> = (
    &'a [crate::model::InstanceType],
    std::collections::HashSet<String>,
);

fn check_rules(doc: &Doc, kind: ApiKind, catalog: Option<&CatalogRef>) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    // A rule over a mistyped field is the schema's error to report.
    if matches!(kind, ApiKind::NodeOverlay | ApiKind::CapacityBuffer)
        && !schema::check(kind, &doc.json).is_empty()
    {
        return out;
    }
    for (path, message) in cel_rules(kind, &doc.json) {
        out.push(diag_at(doc, Diagnostic::error("cel", message), path));
    }
    {
        let mut findings = runtime_findings(kind, &doc.json);
        if kind == ApiKind::NodePool
            && let Some((types, keys)) = catalog
        {
            findings.extend(catalog::check_nodepool(&doc.json, types, keys));
        }
        for f in findings {
            let mut d = Diagnostic::error(f.code, f.message);
            d.severity = f.severity;
            if let Some(h) = f.hint {
                d = d.with_hint(h);
            }
            out.push(diag_at(doc, d, f.path));
        }
    }
    out
}

/// Drops a schema `pattern` diagnostic where a more specific error about the
/// same node exists (a duration, schedule, label or taint message), and exact
/// duplicates.
fn dedupe(mut diags: Vec<Diagnostic>) -> Vec<Diagnostic> {
    let specific: Vec<JsonPath> = diags
        .iter()
        .filter(|d| d.severity == Severity::Error && d.keyword != Some("pattern"))
        .map(|d| d.path.clone())
        .collect();
    diags.retain(|d| !(d.keyword == Some("pattern") && specific.contains(&d.path)));
    let mut seen = std::collections::HashSet::new();
    diags.retain(|d| seen.insert((d.path.clone(), d.message.clone(), d.line, d.column)));
    diags
}

/// The warning on a static NodePool while the `StaticCapacity` gate is
/// off: the controller launches nothing for it, as Karpenter does, and says
/// so rather than ignoring `spec.replicas` in silence.
pub const STATIC_INACTIVE: &str = "static NodePool (spec.replicas) is inactive: the StaticCapacity feature gate is off, so no node is launched for it";

fn inactive_static_pools(report: &mut Report, loaded: &Loaded) {
    let path = JsonPath::parse("spec.replicas");
    let mut diags = Vec::new();
    for o in report.objects_of(ApiKind::NodePool) {
        if o.value.pointer("/spec/replicas").is_none_or(Value::is_null) {
            continue;
        }
        let pos = loaded
            .files
            .iter()
            .find(|f| f.path == o.file)
            .and_then(|f| f.docs.iter().find(|d| d.index == o.index))
            .map(|d| d.root.locate(&path))
            .unwrap_or(o.pos);
        diags.push(
            Diagnostic::warning("static-inactive", STATIC_INACTIVE)
                .in_file(o.file.clone())
                .at(pos)
                .with_object(o.display())
                .with_path(path.clone())
                .with_hint("run the controller with --feature-gates StaticCapacity=true (or FEATURE_GATES), and validate with the same flag"),
        );
    }
    report.diagnostics.extend(diags);
}

/// A NodeOverlay or CapacityBuffer while its feature gate is off: applied
/// to the cluster, but the controller leaves it alone, as Karpenter does.
fn inactive_gated_kind(report: &mut Report, kind: ApiKind) {
    let what = match kind {
        ApiKind::NodeOverlay => "is not applied to instance types",
        _ => "keeps no capacity",
    };
    let diags: Vec<Diagnostic> = report
        .objects_of(kind)
        .map(|o| {
            Diagnostic::warning(
                "gate-off",
                format!("{kind} {what}: the {kind} feature gate is off"),
            )
            .in_file(o.file.clone())
            .at(o.pos)
            .with_object(o.display())
            .with_hint(format!("run the controller with --feature-gates {kind}=true (or FEATURE_GATES), and validate with the same flag"))
        })
        .collect();
    report.diagnostics.extend(diags);
}

fn cross_object(report: &mut Report, loaded: &Loaded, opts: &Options) {
    let docs: HashMap<(&str, usize), &YamlDoc> = loaded
        .files
        .iter()
        .flat_map(|f| f.docs.iter().map(move |d| ((f.path.as_str(), d.index), d)))
        .collect();
    let lookup = |file: &str, index: usize| docs.get(&(file, index)).copied();
    let mut first: HashMap<(ApiKind, String), &Object> = HashMap::new();
    let mut diags = Vec::new();
    for o in &report.objects {
        if o.name.is_empty() {
            continue;
        }
        if let Some(prev) = first.get(&(o.kind, o.key())) {
            diags.push(
                Diagnostic::error(
                    "duplicate",
                    format!(
                        "duplicate {}: also defined at {}{}:{}:{}",
                        o.display(),
                        opts.path_prefix,
                        prev.file,
                        prev.name_pos.line,
                        prev.name_pos.column
                    ),
                )
                .in_file(o.file.clone())
                .at(o.name_pos)
                .with_object(o.display())
                .with_path(JsonPath::parse("metadata.name")),
            );
        } else {
            first.insert((o.kind, o.key()), o);
        }
    }

    let classes: Vec<&str> = report
        .objects_of(ApiKind::EC2NodeClass)
        .map(|o| o.name.as_str())
        .collect();
    for o in report.objects_of(ApiKind::NodePool) {
        let Some(r) = o.value.pointer("/spec/template/spec/nodeClassRef") else {
            continue;
        };
        let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
        let (group, kind, name) = (field("group"), field("kind"), field("name"));
        if group.is_empty() || kind.is_empty() || name.is_empty() {
            continue; // reported by the schema or CEL checks
        }
        let at = |leaf: &str| {
            let path = JsonPath::parse("spec.template.spec.nodeClassRef").key(leaf);
            let pos = lookup(&o.file, o.index)
                .map(|d| d.root.locate(&path))
                .unwrap_or(o.pos);
            (path, pos)
        };
        let ec2 = ApiKind::EC2NodeClass;
        if group != ec2.group() || kind != ec2.kind() {
            let (path, pos) = at(if group != ec2.group() {
                "group"
            } else {
                "kind"
            });
            diags.push(
                Diagnostic::error(
                    "nodeclassref",
                    format!("nodeClassRef {group}/{kind} is not supported; dovetail provisions EC2NodeClass ({}) nodes", ec2.group()),
                )
                .in_file(o.file.clone())
                .at(pos)
                .with_object(o.display())
                .with_path(path),
            );
        } else if !classes.contains(&name) && !opts.allow_external_nodeclass {
            let (path, pos) = at("name");
            diags.push(
                Diagnostic::error(
                    "nodeclassref",
                    format!("EC2NodeClass {name:?} is not defined in the repository"),
                )
                .in_file(o.file.clone())
                .at(pos)
                .with_object(o.display())
                .with_path(path)
                .with_hint(if classes.is_empty() {
                    "add the EC2NodeClass, or pass --allow-external-nodeclass if it is managed elsewhere".to_string()
                } else {
                    format!(
                        "defined EC2NodeClasses: {}; or pass --allow-external-nodeclass if it is managed elsewhere",
                        classes.join(", ")
                    )
                }),
            );
        }
    }

    // A repository that holds only NodeOverlays or CapacityBuffers is not
    // empty either.
    let has_config = report
        .objects
        .iter()
        .any(|o| ApiKind::SYNCED.contains(&o.kind));
    // A repository of retired API versions gets its migration findings only.
    let retired = report.diagnostics.iter().any(|d| d.code == "retired-api");
    if !has_config && !retired {
        diags.push(
            Diagnostic::error("empty-repository", "no NodePool or EC2NodeClass found")
                .with_hint("check the path, the --ref, and .dovetailignore"),
        );
    }
    report.diagnostics.extend(diags);
    for o in &mut report.objects {
        let display = o.display();
        if report.diagnostics.iter().any(|d| {
            d.severity == Severity::Error
                && d.file == o.file
                && d.object.as_deref() == Some(display.as_str())
        }) {
            o.valid = false;
        }
    }
}
