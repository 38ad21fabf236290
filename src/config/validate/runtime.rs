//! Checks the reference autoscaler makes at runtime, beyond its CRD schema and
//! CEL rules: label and taint syntax, well-known
//! values, duration and schedule syntax; and dovetail's warnings.

use std::collections::HashMap;

use serde_json::Value;

use crate::api::names::{label_value_errors, qualified_name_errors};
use crate::diag::{JsonPath, Severity};
use crate::timing::{DurationSyntax, Schedule, parse_duration};

/// One runtime finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub code: &'static str,
    pub path: JsonPath,
    pub message: String,
    pub hint: Option<String>,
}

#[derive(Default)]
struct Out(Vec<Finding>);

impl Out {
    fn error(&mut self, code: &'static str, path: JsonPath, message: impl Into<String>) {
        self.push(Severity::Error, code, path, message.into(), None);
    }

    fn push(
        &mut self,
        severity: Severity,
        code: &'static str,
        path: JsonPath,
        message: String,
        hint: Option<String>,
    ) {
        self.0.push(Finding {
            severity,
            code,
            path,
            message,
            hint,
        });
    }
}

// Restricted label domains: Karpenter v1.14.1 reserves only its own domains,
// `karpenter.sh` (pkg/apis/v1/labels.go `RestrictedLabelDomains`, relaxed in
// v1.9, "relax cel restrictions") and its AWS provider's `karpenter.k8s.aws`,
// plus the hostname label, each with its list of allowed labels. The CRD's
// CEL rules (`rules.rs`, checked against the reference CRDs) enforce exactly
// these, so there is no runtime check of label domains beyond them:
// `kubernetes.io`, `k8s.io` and their subdomains are accepted.

/// Requirement keys whose values Karpenter knows: a requirement `In` whose
/// values are all unknown is an error; one with some unknown values is
/// accepted (Karpenter logs them) and gets a warning. The capacity types are
/// core's `WellKnownValuesForRequirements`; the tenancies are the AWS
/// provider's.
const WELL_KNOWN_VALUES: [(&str, &[&str]); 2] = [
    (
        "karpenter.sh/capacity-type",
        &["on-demand", "spot", "reserved"],
    ),
    (
        "karpenter.k8s.aws/instance-tenancy",
        &["default", "dedicated"],
    ),
];

/// Deprecated label keys and their stable equivalents.
pub const NORMALIZED_LABELS: [(&str, &str); 5] = [
    (
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    ),
    (
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    ),
    ("beta.kubernetes.io/arch", "kubernetes.io/arch"),
    (
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
    ),
    ("beta.kubernetes.io/os", "kubernetes.io/os"),
];

pub fn normalize_label(key: &str) -> &str {
    NORMALIZED_LABELS
        .iter()
        .find(|(old, _)| *old == key)
        .map(|(_, new)| *new)
        .unwrap_or(key)
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn check_duration(out: &mut Out, v: Option<&Value>, path: JsonPath, syntax: DurationSyntax) {
    if let Some(s) = v.and_then(Value::as_str)
        && let Err(e) = parse_duration(s, syntax)
    {
        out.error("duration", path, e);
    }
}

fn check_taints(out: &mut Out, tspec: &Value, tsp: &JsonPath) {
    let mut seen: HashMap<(String, String), JsonPath> = HashMap::new();
    for field in ["taints", "startupTaints"] {
        let Some(list) = tspec.get(field).and_then(Value::as_array) else {
            continue;
        };
        for (i, t) in list.iter().enumerate() {
            let tp = tsp.key(field).index(i);
            let key = str_at(t, "key").unwrap_or("");
            if t.get("key").is_some() {
                for e in qualified_name_errors(key) {
                    out.error("taint", tp.key("key"), format!("invalid taint key {e}"));
                }
            }
            if let Some(value) = str_at(t, "value") {
                for e in label_value_errors(value) {
                    out.error("taint", tp.key("value"), format!("invalid taint value {e}"));
                }
            }
            let effect = str_at(t, "effect").unwrap_or("").to_string();
            let id = (key.to_string(), effect.clone());
            if let Some(first) = seen.get(&id) {
                out.error(
                    "taint",
                    tp.clone(),
                    format!("duplicate taint {key}:{effect}: the same key and effect are already at {first}"),
                );
            } else {
                seen.insert(id, tp.clone());
            }
        }
    }
}

fn check_requirements(out: &mut Out, tspec: &Value, tsp: &JsonPath) {
    let Some(reqs) = tspec.get("requirements").and_then(Value::as_array) else {
        return;
    };
    for (i, r) in reqs.iter().enumerate() {
        let rp = tsp.key("requirements").index(i);
        let Some(key) = str_at(r, "key") else {
            continue;
        };
        for e in qualified_name_errors(key) {
            out.error(
                "requirement",
                rp.key("key"),
                format!("invalid requirement key {e}"),
            );
        }
        let key = normalize_label(key);
        let op = str_at(r, "operator");
        let Some(values) = r.get("values").and_then(Value::as_array) else {
            continue;
        };
        if matches!(op, Some("In" | "NotIn")) {
            for (j, v) in values.iter().enumerate() {
                let Some(v) = v.as_str() else { continue };
                for e in label_value_errors(v) {
                    out.error(
                        "requirement",
                        rp.key("values").index(j),
                        format!("invalid requirement value {e}"),
                    );
                }
            }
        }
        if op == Some("In") {
            check_well_known_values(out, key, values, &rp);
        }
    }
}

/// Karpenter's `validateWellKnownValues`: an `In` requirement on a key with
/// known values is an error when none of its values is known; unknown values
/// beside a known one are a warning (an error under `--strict`).
fn check_well_known_values(out: &mut Out, key: &str, values: &[Value], rp: &JsonPath) {
    let Some((_, known)) = WELL_KNOWN_VALUES.iter().find(|(k, _)| *k == key) else {
        return;
    };
    let strs: Vec<(usize, &str)> = values
        .iter()
        .enumerate()
        .filter_map(|(j, v)| v.as_str().map(|s| (j, s)))
        .collect();
    let unknown: Vec<&(usize, &str)> = strs.iter().filter(|(_, v)| !known.contains(v)).collect();
    if unknown.is_empty() {
        return;
    }
    let expected = known.join(", ");
    if unknown.len() == strs.len() {
        out.error(
            "requirement",
            rp.key("values"),
            format!(
                "no valid values found in [{}] for {key}; expected one of {expected}",
                strs.iter().map(|(_, v)| *v).collect::<Vec<_>>().join(", ")
            ),
        );
        return;
    }
    for (j, v) in unknown {
        out.push(
            Severity::Warning,
            "requirement-value",
            rp.key("values").index(*j),
            format!("{v:?} is not a known value of {key} (expected one of {expected}); Karpenter ignores it"),
            Some("remove it; --strict makes this an error".into()),
        );
    }
}

fn check_labels(out: &mut Out, labels: &Value, lp: &JsonPath) {
    let Some(labels) = labels.as_object() else {
        return;
    };
    for (k, v) in labels {
        let kp = lp.key(k.clone());
        for e in qualified_name_errors(k) {
            out.error("label", kp.clone(), format!("invalid label key {e}"));
        }
        if let Some(v) = v.as_str() {
            for e in label_value_errors(v) {
                out.error("label", kp.clone(), format!("invalid label value {e}"));
            }
        }
    }
}

/// Runtime checks and warnings for a NodePool.
pub fn nodepool(doc: &Value) -> Vec<Finding> {
    let mut out = Out::default();
    let Some(spec) = doc.get("spec").filter(|s| s.is_object()) else {
        return out.0;
    };
    let sp = JsonPath::root().key("spec");
    let dp = sp.key("disruption");
    let disruption = spec.get("disruption");
    check_duration(
        &mut out,
        disruption.and_then(|d| d.get("consolidateAfter")),
        dp.key("consolidateAfter"),
        DurationSyntax::HmsOrNever,
    );
    if let Some(budgets) = disruption
        .and_then(|d| d.get("budgets"))
        .and_then(Value::as_array)
    {
        for (i, b) in budgets.iter().enumerate() {
            let bp = dp.key("budgets").index(i);
            check_duration(
                &mut out,
                b.get("duration"),
                bp.key("duration"),
                DurationSyntax::HoursMinutes,
            );
            if let Some(s) = str_at(b, "schedule")
                && let Err(e) = Schedule::parse(s)
            {
                out.error("schedule", bp.key("schedule"), e);
            }
        }
    }
    let tp = sp.key("template");
    if let Some(labels) = spec.pointer("/template/metadata/labels") {
        check_labels(&mut out, labels, &tp.key("metadata").key("labels"));
    }
    if let Some(tspec) = spec.pointer("/template/spec").filter(|s| s.is_object()) {
        let tsp = tp.key("spec");
        check_duration(
            &mut out,
            tspec.get("expireAfter"),
            tsp.key("expireAfter"),
            DurationSyntax::HmsOrNever,
        );
        check_duration(
            &mut out,
            tspec.get("terminationGracePeriod"),
            tsp.key("terminationGracePeriod"),
            DurationSyntax::Hms,
        );
        check_taints(&mut out, tspec, &tsp);
        check_requirements(&mut out, tspec, &tsp);
    }
    warnings(&mut out, spec, &sp);
    out.0
}

/// Runtime checks for a NodeOverlay, the reference's `RuntimeValidate`:
/// each requirement as a NodePool's (key and value syntax, well-known
/// values; restricted domains and operators are the CRD's rules). Its
/// capacity's restricted resources are a CEL rule of the CRD.
pub fn nodeoverlay(doc: &Value) -> Vec<Finding> {
    let mut out = Out::default();
    if let Some(spec) = doc.get("spec").filter(|s| s.is_object()) {
        check_requirements(&mut out, spec, &JsonPath::root().key("spec"));
    }
    out.0
}

/// GPU instance categories on AWS.
const GPU_CATEGORIES: [&str; 2] = ["g", "p"];

fn warnings(out: &mut Out, spec: &Value, sp: &JsonPath) {
    let is_static = spec.get("replicas").is_some_and(|r| !r.is_null());
    let limits_empty = spec
        .get("limits")
        .and_then(Value::as_object)
        .is_none_or(|l| l.is_empty());
    if !is_static && limits_empty {
        out.push(
            Severity::Warning,
            "no-limits",
            sp.clone(),
            "NodePool has no limits: it can launch capacity without bound".into(),
            Some("set spec.limits, e.g. cpu: \"1000\" and memory: 1000Gi".into()),
        );
    }
    let reqs: &[Value] = spec
        .pointer("/template/spec/requirements")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let values_of = |key: &str, op: &str| -> Option<Vec<&str>> {
        reqs.iter()
            .find(|r| str_at(r, "key") == Some(key) && str_at(r, "operator") == Some(op))
            .and_then(|r| r.get("values").and_then(Value::as_array))
            .map(|vs| vs.iter().filter_map(Value::as_str).collect())
    };
    let spot_only = values_of("karpenter.sh/capacity-type", "In").is_some_and(|v| v == ["spot"])
        || values_of("karpenter.sh/capacity-type", "NotIn")
            .is_some_and(|v| v.contains(&"on-demand") && v.contains(&"reserved"));
    let gpu_by_category = values_of("karpenter.k8s.aws/instance-category", "In")
        .is_some_and(|v| !v.is_empty() && v.iter().all(|c| GPU_CATEGORIES.contains(c)));
    let gpu_by_family = values_of("karpenter.k8s.aws/instance-family", "In").is_some_and(|v| {
        !v.is_empty()
            && v.iter()
                .all(|f| GPU_CATEGORIES.iter().any(|c| f.starts_with(c)))
    });
    let gpu_by_count = reqs.iter().any(|r| {
        str_at(r, "key") == Some("karpenter.k8s.aws/instance-gpu-count")
            && matches!(str_at(r, "operator"), Some("Gt" | "Gte" | "Exists"))
    });
    if spot_only && (gpu_by_category || gpu_by_family || gpu_by_count) {
        out.push(
            Severity::Warning,
            "spot-only-gpu",
            sp.key("template").key("spec").key("requirements"),
            "spot-only NodePool for GPU instance families: GPU spot capacity is scarce and often interrupted, so pods may stay pending".into(),
            Some("allow on-demand as a fallback: karpenter.sh/capacity-type In [spot, on-demand]".into()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn codes(doc: &Value) -> Vec<(String, &'static str)> {
        nodepool(doc)
            .iter()
            .map(|f| (f.path.to_string(), f.code))
            .collect()
    }

    #[test]
    fn durations_and_schedules_are_checked() {
        let doc = json!({"spec": {"limits": {"cpu": "1"},
            "disruption": {"consolidateAfter": "5d", "budgets": [{"nodes": "1", "schedule": "0 0 L * *", "duration": "30s"}]},
            "template": {"spec": {"expireAfter": "Never", "terminationGracePeriod": "Never"}}}});
        assert_eq!(
            codes(&doc),
            [
                ("spec.disruption.consolidateAfter".into(), "duration"),
                ("spec.disruption.budgets[0].duration".into(), "duration"),
                ("spec.disruption.budgets[0].schedule".into(), "schedule"),
                (
                    "spec.template.spec.terminationGracePeriod".into(),
                    "duration"
                ),
            ]
        );
    }

    #[test]
    fn duplicate_taints_across_lists() {
        let doc = json!({"spec": {"limits": {"cpu": "1"}, "template": {"spec": {
            "taints": [{"key": "a", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]}}}});
        let got = nodepool(&doc);
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].path.to_string(),
            "spec.template.spec.startupTaints[0]"
        );
        assert!(got[0].message.contains("spec.template.spec.taints[0]"));
    }

    /// Karpenter v1.14.1 restricts only karpenter.sh and karpenter.k8s.aws
    /// (pkg/apis/v1/labels.go RestrictedLabelDomains since v1.9, and the
    /// CRD's CEL rules, checked in `rules`): kubernetes.io and k8s.io
    /// labels are accepted. Well-known values follow validateWellKnownValues:
    /// some unknown values warn, all unknown is an error.
    #[test]
    fn kubernetes_domains_are_free_and_well_known_values_fail_open() {
        let doc = json!({"spec": {"limits": {"cpu": "1"}, "template": {
        "metadata": {"labels": {"kubernetes.io/role": "x", "subdomain.k8s.io/test": "y", "team": "a b"}},
        "spec": {"requirements": [
            {"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "k8s.io/foo", "operator": "Exists"},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "preemptible"]},
            {"key": "karpenter.k8s.aws/instance-tenancy", "operator": "In", "values": ["shared"]}
        ]}}}});
        let got: Vec<(String, &str, Severity)> = nodepool(&doc)
            .iter()
            .map(|f| (f.path.to_string(), f.code, f.severity))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "spec.template.metadata.labels.team".into(),
                    "label",
                    Severity::Error
                ),
                (
                    "spec.template.spec.requirements[2].values[1]".into(),
                    "requirement-value",
                    Severity::Warning
                ),
                (
                    "spec.template.spec.requirements[3].values".into(),
                    "requirement",
                    Severity::Error
                ),
            ]
        );
    }

    #[test]
    fn warnings_for_unbounded_and_spot_only_gpu_pools() {
        let doc = json!({"spec": {"template": {"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["g", "p"]}
        ]}}}});
        let got: Vec<&str> = nodepool(&doc).iter().map(|f| f.code).collect();
        assert_eq!(got, ["no-limits", "spot-only-gpu"]);
        assert!(
            nodepool(&doc)
                .iter()
                .all(|f| f.severity == Severity::Warning)
        );
    }
}
