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

pub mod impact;
pub mod normalise;
pub mod revisions;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::ApiKind;
use crate::config::load::Loaded;
use crate::config::validate::{self, Object, Options, Report, transition};
use crate::diag::{Diagnostic, JsonPath, Severity};
pub use revisions::{RevisionError, Revisions, Side, WORKTREE, read, read_one, read_worktree};

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

/// A comparison with the validated objects of both sides (for `--impact`).
#[derive(Debug, Clone)]
pub struct Compared {
    pub comparison: Comparison,
    pub from: Vec<Object>,
    pub to: Vec<Object>,
}

/// Validates both revisions (with `opts`, as `dovetail validate` does) and
/// compares them.
pub fn diff(revisions: &Revisions, opts: &Options) -> Outcome {
    match diff_with_objects(revisions, opts) {
        Ok(compared) => Outcome::Compared(compared.comparison),
        Err(report) => Outcome::InvalidTo(report),
    }
}

/// [`diff`], keeping the objects of both sides; the error is the
/// validator's report of an invalid `--to` revision.
pub fn diff_with_objects(revisions: &Revisions, opts: &Options) -> Result<Compared, Box<Report>> {
    let to = validate::validate(&revisions.to_loaded, opts);
    if !to.passes(false) {
        return Err(Box::new(to));
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
                        "`dovetail validate {}--ref {}` shows the errors",
                        match opts.path_prefix.as_str() {
                            "" => String::new(),
                            path => format!("{path} "),
                        },
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
    Ok(Compared {
        comparison,
        from: from_objects,
        to: to.objects,
    })
}

/// Objects by kind and name; of duplicates (which the validator reports),
/// the first.
fn by_key(objects: &[Object]) -> BTreeMap<(&'static str, String), &Object> {
    let mut map = BTreeMap::new();
    for o in objects.iter().filter(|o| !o.name.is_empty()) {
        map.entry((o.kind.kind(), o.key())).or_insert(o);
    }
    map
}

/// Compares the objects of two revisions (as found by the validator);
/// `to_loaded` gives the positions of transition-rule violations.
/// `opts.path_prefix` is prepended to file names.
pub fn compare(from: &[Object], to: &[Object], to_loaded: &Loaded, opts: &Options) -> Comparison {
    let (old, new) = (by_key(from), by_key(to));
    let mut keys: Vec<&(&str, String)> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Comparison::default();
    for key in keys {
        let (o, n) = (old.get(key).copied(), new.get(key).copied());
        let Some(any) = n.or(o) else { continue };
        let old = o.map(|o| (o, normalise::normalise(o.kind, &o.value)));
        let new = n.map(|n| (n, normalise::normalise(n.kind, &n.value)));
        let diff = object_diff(
            any,
            old.as_ref().map(|(o, v)| (*o, v)),
            new.as_ref().map(|(n, v)| (*n, v)),
            &opts.path_prefix,
        );
        if let (Some((_, a)), Some((n, b))) = (&old, &new) {
            if let Some(prev) = &diff.previous_file {
                out.diagnostics.push(
                    Diagnostic::note(codes::MOVED, format!("moved from {prev}"))
                        .in_file(diff.file.clone())
                        .at(n.name_pos)
                        .with_object(diff.display()),
                );
            }
            out.diagnostics
                .extend(transition_diagnostics(n, a, b, to_loaded, &diff.file));
        }
        out.objects.push(diff);
    }
    out.diagnostics
        .sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    out
}

/// The comparison of one object (`any` is the newer of the two sides), given
/// each side's object and normalised value.
fn object_diff(
    any: &Object,
    old: Option<(&Object, &Value)>,
    new: Option<(&Object, &Value)>,
    prefix: &str,
) -> ObjectDiff {
    let (change, changed_paths) = match (old, new) {
        (Some((_, a)), Some((_, b))) => {
            let paths = normalise::changed_paths(a, b);
            let change = if paths.is_empty() {
                Change::Unchanged
            } else {
                Change::Changed
            };
            (change, paths)
        }
        (None, _) => (Change::Created, Vec::new()),
        (_, None) => (Change::Deleted, Vec::new()),
    };
    let diff = if change == Change::Unchanged {
        String::new()
    } else {
        let yaml = |side: Option<(&Object, &Value)>| {
            side.map(|(_, v)| normalise::to_yaml(v)).unwrap_or_default()
        };
        let header = |side: Option<(&Object, &Value)>| match side {
            Some((o, _)) => format!("{prefix}{}", o.file),
            None => "/dev/null".to_string(),
        };
        let (old_yaml, new_yaml) = (yaml(old), yaml(new));
        similar::TextDiff::from_lines(&old_yaml, &new_yaml)
            .unified_diff()
            .context_radius(3)
            .header(&header(old), &header(new))
            .to_string()
    };
    let previous_file = match (old, new) {
        (Some((o, _)), Some((n, _))) if o.file != n.file => Some(format!("{prefix}{}", o.file)),
        _ => None,
    };
    ObjectDiff {
        kind: any.kind,
        name: any.key(),
        change,
        file: format!("{prefix}{}", any.file),
        previous_file,
        changed_paths,
        diff,
    }
}

/// The transition rules broken by updating `old` to `new` (both normalised),
/// at the positions of the `--to` object `object` in `file`.
fn transition_diagnostics(
    object: &Object,
    old: &Value,
    new: &Value,
    to_loaded: &Loaded,
    file: &str,
) -> Vec<Diagnostic> {
    let doc = to_loaded
        .files
        .iter()
        .find(|f| f.path == object.file)
        .and_then(|f| f.docs.iter().find(|d| d.index == object.index));
    transition::check(object.kind, old, new)
        .into_iter()
        .map(|finding| {
            let pos = doc.map_or(object.pos, |d| d.root.locate(&finding.path));
            let mut d = Diagnostic::error(codes::TRANSITION, finding.message.clone())
                .in_file(file)
                .at(pos)
                .with_object(object.display());
            if let Some(hint) = transition::hint(&finding) {
                d = d.with_hint(hint);
            }
            d.with_path(finding.path)
        })
        .collect()
}
