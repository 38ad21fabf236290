//! The bodies of the fuzz targets (`fuzz/`, cargo-fuzz) over every parser
//! of input dovetail takes from users, the API server and the cloud. Each
//! takes raw bytes and must neither panic nor hang; where a parser has an
//! invariant cheap to state, the body asserts it too. `tests/fuzz_corpus.rs`
//! runs every body over the committed corpus on the stable toolchain, so a
//! crash once found stays fixed without libFuzzer.

use serde_json::Value;

use crate::cluster::Selector;
use crate::config::yaml::{Limits, parse_documents};
use crate::serve::patch::{self, PatchType};
use crate::serve::query::FieldSelector;
use crate::timing::{self, DurationSyntax, NillableDuration, Schedule};

/// A target's body: raw bytes in, a panic for a failure.
pub type Target = fn(&[u8]);

/// Every target, by the name of its corpus directory and fuzz binary.
pub const TARGETS: &[(&str, Target)] = &[
    ("yaml", yaml),
    ("validate", validate),
    ("duration", duration),
    ("cron", cron),
    ("quantity", quantity),
    ("label_selector", label_selector),
    ("field_selector", field_selector),
    ("patch", patch),
    ("eventbridge", eventbridge),
    ("snapshot", snapshot),
];

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// The YAML reader (the fast line reader where it applies, else the
/// general parser): reading twice gives the same documents and problems.
pub fn yaml(data: &[u8]) {
    let limits = Limits::default();
    let first = parse_documents("fuzz.yaml", data, &limits);
    let again = parse_documents("fuzz.yaml", data, &limits);
    assert_eq!(first, again, "the same bytes read twice differ");
    for doc in &first.docs {
        let _ = doc.root.to_json();
    }
}

/// `dovetail validate` on one file of a repository.
pub fn validate(data: &[u8]) {
    let loaded = crate::config::load::parse_one("fuzz.yaml", data, &Limits::default());
    let report =
        crate::config::validate::validate(&loaded, &crate::config::validate::Options::default());
    // Every diagnostic names a position in the file or none.
    for d in &report.diagnostics {
        assert!(d.file.is_empty() || d.file == "fuzz.yaml", "{d:?}");
    }
}

/// Go durations and Karpenter's duration fields.
pub fn duration(data: &[u8]) {
    let Some(s) = text(data) else { return };
    if let Ok(nanos) = timing::parse_go_duration(s) {
        assert!(nanos.unsigned_abs() <= 1 << 63, "{s:?}: {nanos}");
    }
    for syntax in [
        DurationSyntax::HmsOrNever,
        DurationSyntax::Hms,
        DurationSyntax::HoursMinutes,
    ] {
        if let Ok(NillableDuration::After(d)) = timing::parse_duration(s, syntax) {
            // What Karpenter's ParseDuration would accept: within int64 ns.
            assert!(d.as_nanos() <= i64::MAX as u128, "{s:?}: {d:?}");
        }
    }
}

/// Budget schedules, and their next activations.
pub fn cron(data: &[u8]) {
    let Some(s) = text(data) else { return };
    let Ok(schedule) = Schedule::parse(s) else {
        return;
    };
    let mut t = crate::clock::Timestamp::UNIX_EPOCH;
    for _ in 0..3 {
        let Some(next) = schedule.next_after(t) else {
            break;
        };
        assert!(next > t, "{s:?}: {next} is not after {t}");
        t = next;
    }
}

/// Quantities, in every canonical unit.
pub fn quantity(data: &[u8]) {
    let Some(s) = text(data) else { return };
    let milli = crate::model::quantity::parse_scaled(s, 3);
    let whole = crate::model::quantity::parse_scaled(s, 0);
    assert_eq!(milli.is_ok(), whole.is_ok(), "{s:?}");
    if let (Ok(m), Ok(w)) = (milli, whole)
        && w > 0
        && w < i64::MAX / 1000
    {
        // Both round up: the whole units hold the thousandths.
        assert!(m <= w * 1000 && m > (w - 1) * 1000, "{s:?}: {m} milli, {w}");
    }
}

/// Label selectors, matched against a few label sets.
pub fn label_selector(data: &[u8]) {
    let Some(s) = text(data) else { return };
    let Ok(selector) = Selector::parse(s) else {
        return;
    };
    let sets = [vec![], vec![("a", "x")], vec![("a", "5"), ("b", "")]];
    for set in sets {
        let labels = set
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let _ = selector.matches(&labels);
    }
}

/// Field selectors.
pub fn field_selector(data: &[u8]) {
    let Some(s) = text(data) else { return };
    if let Ok(f) = FieldSelector::parse(s) {
        let _ = f.matches(&serde_json::json!({"metadata": {"name": "a"}}));
    }
}

/// JSON, merge and strategic merge patches: the first byte picks the
/// kind, a NUL byte separates the target (a pod when it is not JSON) from
/// the patch.
pub fn patch(data: &[u8]) {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let kind = match kind % 3 {
        0 => PatchType::Json,
        1 => PatchType::Merge,
        _ => PatchType::Strategic,
    };
    let (target, body) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (&[][..], rest),
    };
    let target: Value = serde_json::from_slice(target).unwrap_or_else(|_| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "x"}, "finalizers": ["f"]},
            "spec": {"containers": [{"name": "a", "image": "i", "ports": [{"containerPort": 80}]}]}
        })
    });
    let _ = patch::apply(kind, &target, body);
}

/// EventBridge messages from the interruption queue.
pub fn eventbridge(data: &[u8]) {
    let _ = crate::interruption::message::parse_bytes(data);
}

/// Snapshot and scenario files: objects, then the snapshot built from them.
pub fn snapshot(data: &[u8]) {
    let Some(s) = text(data) else { return };
    if let Ok(objects) = crate::snapshot::parse_objects("fuzz.yaml", s) {
        let _ = crate::snapshot::snapshot_from_objects("fuzz.yaml", &objects);
    }
}
