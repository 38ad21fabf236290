//! Checks the reference autoscaler makes at runtime, beyond its CRD schema and
//! CEL rules: label and taint syntax, restricted label domains, well-known
//! values, duration and schedule syntax; and dovetail's warnings.

use std::collections::HashMap;

use serde_json::Value;

use super::names::{label_domain, label_value_errors, qualified_name_errors};
use crate::api::ALLOWED_KARPENTER_AWS_LABELS;
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

/// Domains whose labels the kubelet rejects or Karpenter reserves.
const RESTRICTED_DOMAINS: [&str; 4] = [
    "kubernetes.io",
    "k8s.io",
    "karpenter.sh",
    "karpenter.k8s.aws",
];
/// Subdomains of the restricted domains that are allowed.
const DOMAIN_EXCEPTIONS: [&str; 3] = [
    "kops.k8s.io",
    "node.kubernetes.io",
    "node-restriction.kubernetes.io",
];
/// Labels in restricted domains that Karpenter understands and allows.
const WELL_KNOWN: [&str; 9] = [
    "karpenter.sh/nodepool",
    "karpenter.sh/capacity-type",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/windows-build",
    "topology.k8s.aws/zone-id",
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

fn is_well_known(key: &str) -> bool {
    WELL_KNOWN.contains(&key) || ALLOWED_KARPENTER_AWS_LABELS.contains(&key)
}

/// Whether a node label key may not be set or required by a NodePool, for
/// the domains the CEL rules do not already cover.
fn restricted_beyond_cel(key: &str) -> bool {
    if is_well_known(key) {
        return false;
    }
    let domain = label_domain(key);
    // karpenter.sh, karpenter.k8s.aws and the hostname label are reported
    // by the CEL rules.
    if domain.ends_with("karpenter.sh")
        || domain.ends_with("karpenter.k8s.aws")
        || key == "kubernetes.io/hostname"
    {
        return false;
    }
    if DOMAIN_EXCEPTIONS.iter().any(|e| domain.ends_with(e)) {
        return false;
    }
    RESTRICTED_DOMAINS.iter().any(|d| domain.ends_with(d))
}

fn restricted_message(key: &str) -> String {
    format!(
        "label {key:?} is restricted; use a well-known label ({}) or a custom label outside the domains {}",
        WELL_KNOWN[..8].join(", "),
        RESTRICTED_DOMAINS.join(", ")
    )
}

const CAPACITY_TYPES: [&str; 3] = ["on-demand", "spot", "reserved"];

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
        if restricted_beyond_cel(key) {
            out.error("requirement", rp.key("key"), restricted_message(key));
        }
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
                if key == "karpenter.sh/capacity-type" && !CAPACITY_TYPES.contains(&v) {
                    out.error(
                        "requirement",
                        rp.key("values").index(j),
                        format!("{v:?} is not a capacity type; expected one of on-demand, spot, reserved"),
                    );
                }
            }
        }
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
        if restricted_beyond_cel(k) {
            out.error("label", kp, restricted_message(k));
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

    #[test]
    fn restricted_labels_and_well_known_values() {
        let doc = json!({"spec": {"limits": {"cpu": "1"}, "template": {
        "metadata": {"labels": {"kubernetes.io/role": "x", "node.kubernetes.io/pool": "ok", "team": "a b"}},
        "spec": {"requirements": [
            {"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "k8s.io/foo", "operator": "Exists"},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "preemptible"]}
        ]}}}});
        assert_eq!(
            codes(&doc),
            [
                (
                    "spec.template.metadata.labels[\"kubernetes.io/role\"]".into(),
                    "label"
                ),
                ("spec.template.metadata.labels.team".into(), "label"),
                (
                    "spec.template.spec.requirements[1].key".into(),
                    "requirement"
                ),
                (
                    "spec.template.spec.requirements[2].values[1]".into(),
                    "requirement"
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
