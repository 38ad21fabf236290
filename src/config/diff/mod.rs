//! `dovetail diff`: what changes between two revisions of the configuration.
//!
//! Objects are matched by kind and name, not by file, so moving an object to
//! another file is not a change (it is reported as a note). Objects are
//! compared structurally after [normalisation](normalise::normalise): key
//! order, spelled-out defaults, `status`, server-managed metadata and
//! `dovetail.dev/*` annotations make no difference. The `--to` revision must
//! be valid; an invalid `--from` revision is compared with a warning. The
//! transition rules of the reference CRDs
//! ([`crate::config::validate::transition`]) are checked for every object
//! present on both sides.

pub mod normalise;
pub mod revisions;

use std::collections::BTreeMap;

use crate::api::ApiKind;
use crate::config::load::Loaded;
use crate::config::validate::{self, Object, Options, Report, transition};
use crate::diag::{Diagnostic, JsonPath, Severity};
pub use revisions::{RevisionError, Revisions, Side, read};

/// Diagnostic codes produced here.
pub mod codes {
    /// A transition rule (`oldSelf`) of the reference CRDs is violated.
    pub const TRANSITION: &str = "transition";
    /// The `--from` revision does not validate; it is compared anyway.
    pub const INVALID_FROM: &str = "invalid-from";
    /// An object moved to another file (not a change).
    pub const MOVED: &str = "moved";
    /// PATH does not exist on the `--from` side.
    pub const PATH_NOT_IN_REVISION: &str = "path-not-in-revision";
}

/// What happens to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Change {
    Created,
    Changed,
    Deleted,
    Unchanged,
}

impl Change {
    /// `created`, `changed`, `deleted` or `unchanged`.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Created => "created",
            Change::Changed => "changed",
            Change::Deleted => "deleted",
            Change::Unchanged => "unchanged",
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The comparison of one object.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectDiff {
    pub kind: ApiKind,
    pub name: String,
    pub change: Change,
    /// The file on the `--to` side (on the `--from` side for a deletion), as
    /// the user addressed it (with PATH's prefix).
    pub file: String,
    /// The file on the `--from` side, when the object moved.
    pub previous_file: Option<String>,
    /// Where the normalised objects differ; empty unless changed.
    pub changed_paths: Vec<JsonPath>,
    /// A unified diff of the normalised objects as YAML; empty when unchanged.
    pub diff: String,
}

impl ObjectDiff {
    /// `Kind/name`.
    pub fn display(&self) -> String {
        format!("{}/{}", self.kind.kind(), self.name)
    }
}

/// How many objects change in each way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub created: usize,
    pub changed: usize,
    pub deleted: usize,
    pub unchanged: usize,
}

/// The result of comparing two revisions.
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    /// Every object of either side, sorted by kind and name.
    pub objects: Vec<ObjectDiff>,
    /// Transition-rule violations (errors), an invalid `--from` side
    /// (warning), moved objects (notes); sorted by file and position.
    pub diagnostics: Vec<Diagnostic>,
}

impl Comparison {
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for o in &self.objects {
            *match o.change {
                Change::Created => &mut s.created,
                Change::Changed => &mut s.changed,
                Change::Deleted => &mut s.deleted,
                Change::Unchanged => &mut s.unchanged,
            } += 1;
        }
        s
    }

    /// Whether any object is created, changed or deleted.
    pub fn has_differences(&self) -> bool {
        self.objects.iter().any(|o| o.change != Change::Unchanged)
    }

    /// Whether a diagnostic is an error (a transition-rule violation).
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }
}

/// The outcome of [`diff`].
#[derive(Debug, Clone)]
pub enum Outcome {
    Compared(Comparison),
    /// The `--to` revision does not validate: the validator's report.
    InvalidTo(Box<Report>),
}

/// Validates both revisions (with `opts`, as `dovetail validate` does) and
/// compares them.
pub fn diff(revisions: &Revisions, opts: &Options) -> Outcome {
    let to = validate::validate(&revisions.to_loaded, opts);
    if !to.passes(false) {
        return Outcome::InvalidTo(Box::new(to));
    }
    let mut diagnostics = Vec::new();
    let from_objects = match &revisions.from_loaded {
        Some(loaded) => {
            let from = validate::validate(loaded, opts);
            let errors = from.count(Severity::Error);
            if errors > 0 {
                let side = &revisions.from;
                diagnostics.push(
                    Diagnostic::warning(
                        codes::INVALID_FROM,
                        format!(
                            "`{}` ({}) is invalid ({errors} error{}); comparing with it anyway",
                            side.git_ref,
                            side.short_sha(),
                            if errors == 1 { "" } else { "s" }
                        ),
                    )
                    .with_hint(format!(
                        "run `dovetail validate --ref {}` to see the errors",
                        side.sha
                    )),
                );
            }
            from.objects
        }
        None => {
            diagnostics.push(Diagnostic::note(
                codes::PATH_NOT_IN_REVISION,
                format!(
                    "the configuration directory does not exist at `{}`; every object is created",
                    revisions.from.git_ref
                ),
            ));
            Vec::new()
        }
    };
    let mut comparison = compare(&from_objects, &to.objects, &revisions.to_loaded, opts);
    diagnostics.append(&mut comparison.diagnostics);
    diagnostics.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    comparison.diagnostics = diagnostics;
    Outcome::Compared(comparison)
}

/// Objects by kind and name; of duplicates (which the validator reports),
/// the first.
fn by_key(objects: &[Object]) -> BTreeMap<(&'static str, &str), &Object> {
    let mut map = BTreeMap::new();
    for o in objects.iter().filter(|o| !o.name.is_empty()) {
        map.entry((o.kind.kind(), o.name.as_str())).or_insert(o);
    }
    map
}

/// Compares the objects of two revisions (as found by the validator);
/// `to_loaded` gives the positions of transition-rule violations.
/// `opts.path_prefix` is prepended to file names.
pub fn compare(from: &[Object], to: &[Object], to_loaded: &Loaded, opts: &Options) -> Comparison {
    let (old, new) = (by_key(from), by_key(to));
    let mut keys: Vec<&(&str, &str)> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();

    let prefix = &opts.path_prefix;
    let mut out = Comparison::default();
    for key in keys {
        let (o, n) = (old.get(key).copied(), new.get(key).copied());
        let Some(any) = n.or(o) else { continue };
        let kind = any.kind;
        let old_value = o.map(|o| normalise::normalise(kind, &o.value));
        let new_value = n.map(|n| normalise::normalise(kind, &n.value));
        let old_yaml = old_value.as_ref().map(normalise::to_yaml);
        let new_yaml = new_value.as_ref().map(normalise::to_yaml);
        let file = format!("{prefix}{}", any.file);
        let (change, changed_paths) = match (&old_value, &new_value) {
            (None, _) => (Change::Created, Vec::new()),
            (_, None) => (Change::Deleted, Vec::new()),
            (Some(a), Some(b)) => {
                let paths = normalise::changed_paths(a, b);
                let change = if paths.is_empty() {
                    Change::Unchanged
                } else {
                    Change::Changed
                };
                (change, paths)
            }
        };
        let previous_file = match (o, n) {
            (Some(o), Some(n)) if o.file != n.file => Some(format!("{prefix}{}", o.file)),
            _ => None,
        };
        let diff = if change == Change::Unchanged {
            String::new()
        } else {
            let header = |obj: Option<&Object>| match obj {
                Some(obj) => format!("{prefix}{}", obj.file),
                None => "/dev/null".to_string(),
            };
            similar::TextDiff::from_lines(
                old_yaml.as_deref().unwrap_or(""),
                new_yaml.as_deref().unwrap_or(""),
            )
            .unified_diff()
            .context_radius(3)
            .header(&header(o), &header(n))
            .to_string()
        };
        if let (Some(n), Some(a), Some(b)) = (n, &old_value, &new_value) {
            let display = format!("{}/{}", kind.kind(), n.name);
            if let Some(prev) = &previous_file {
                out.diagnostics.push(
                    Diagnostic::note(codes::MOVED, format!("moved from {prev}"))
                        .in_file(file.clone())
                        .at(n.name_pos)
                        .with_object(display.clone()),
                );
            }
            let doc = to_loaded
                .files
                .iter()
                .find(|f| f.path == n.file)
                .and_then(|f| f.docs.iter().find(|d| d.index == n.index));
            for finding in transition::check(kind, a, b) {
                let pos = doc.map_or(n.pos, |d| d.root.locate(&finding.path));
                let mut d = Diagnostic::error(codes::TRANSITION, finding.message.clone())
                    .in_file(file.clone())
                    .at(pos)
                    .with_object(display.clone());
                if let Some(hint) = transition::hint(&finding) {
                    d = d.with_hint(hint);
                }
                out.diagnostics.push(d.with_path(finding.path));
            }
        }
        out.objects.push(ObjectDiff {
            kind,
            name: any.name.clone(),
            change,
            file,
            previous_file,
            changed_paths,
            diff,
        });
    }
    out.diagnostics
        .sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    out
}
