//! `validate --catalog`: warnings for NodePools that no instance type of a
//! catalog can satisfy, so a pool that could never launch anything is
//! caught in review rather than by pending pods.
//!
//! Only keys the catalog defines are checked; a requirement on a custom
//! label is satisfiable because the node gets that label from the NodePool.

use std::collections::{BTreeSet, HashSet};

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use serde_json::Value;

use super::runtime::Finding;
use crate::diag::{JsonPath, Severity};
use crate::model::{InstanceType, Requirements};

/// The keys some instance type of the catalog defines.
pub fn defined_keys(catalog: &[InstanceType]) -> HashSet<String> {
    catalog
        .iter()
        .flat_map(|it| it.requirements.0.keys().cloned())
        .collect()
}

fn warning(path: JsonPath, message: String) -> Finding {
    Finding {
        severity: Severity::Warning,
        code: "catalog",
        path,
        message,
        hint: None,
    }
}

/// Warnings for one NodePool document against a catalog.
pub fn check_nodepool(
    doc: &Value,
    catalog: &[InstanceType],
    keys: &HashSet<String>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let Some(reqs) = doc
        .pointer("/spec/template/spec/requirements")
        .and_then(Value::as_array)
    else {
        return out;
    };
    let rp = JsonPath::parse("spec.template.spec.requirements");
    let mut all = Requirements::new();
    let mut min_values = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        let Ok(req) = serde_json::from_value::<NodeSelectorRequirement>(r.clone()) else {
            continue; // reported by the schema check
        };
        if !keys.contains(crate::config::validate::runtime::normalize_label(&req.key)) {
            continue;
        }
        let Ok(one) = Requirements::from_node_selector(std::slice::from_ref(&req)) else {
            continue; // reported by the CEL and runtime checks
        };
        let fits = |it: &&InstanceType| it.requirements.compatible(&one, |_| true).is_ok();
        if !catalog.iter().any(|it| fits(&it)) {
            let values = req.values.clone().unwrap_or_default();
            out.push(warning(
                rp.index(i),
                format!(
                    "no instance type of the catalog satisfies {} {} [{}]",
                    req.key,
                    req.operator,
                    values.join(", ")
                ),
            ));
        }
        if let Some(n) = r.get("minValues").and_then(Value::as_u64) {
            min_values.push((i, req.key.clone(), n));
        }
        all.intersect_with(&one);
    }
    if !out.is_empty() {
        return out;
    }
    let fitting: Vec<&InstanceType> = catalog
        .iter()
        .filter(|it| it.requirements.compatible(&all, |_| true).is_ok())
        .collect();
    if fitting.is_empty() {
        out.push(warning(
            rp,
            "no instance type of the catalog satisfies all the requirements together".into(),
        ));
        return out;
    }
    for (i, key, n) in min_values {
        let distinct: BTreeSet<&str> = fitting
            .iter()
            .filter_map(|it| it.requirements.get(&key))
            .flat_map(|r| r.values.iter().map(String::as_str))
            .collect();
        if (distinct.len() as u64) < n {
            out.push(warning(
                rp.index(i).key("minValues"),
                format!(
                    "minValues {n} for {key}, but the instance types of the catalog that satisfy the requirements offer only {} value(s)",
                    distinct.len()
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn catalog() -> Vec<InstanceType> {
        let text = json!({"instanceTypes": [
            {"name": "m5.large", "labels": {"node.kubernetes.io/instance-type": "m5.large",
                "karpenter.k8s.aws/instance-family": "m5", "kubernetes.io/arch": "amd64"},
             "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "29"},
             "offerings": [{"zone": "a", "capacityType": "on-demand", "price": 0.1, "available": true}]},
            {"name": "m6g.large", "labels": {"node.kubernetes.io/instance-type": "m6g.large",
                "karpenter.k8s.aws/instance-family": "m6g", "kubernetes.io/arch": "arm64"},
             "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "29"},
             "offerings": [{"zone": "a", "capacityType": "on-demand", "price": 0.08, "available": true}]}
        ]})
        .to_string();
        crate::model::catalog::parse_catalog("c.json", &text).unwrap()
    }

    fn pool(reqs: Value) -> Value {
        json!({"spec": {"template": {"spec": {"requirements": reqs}}}})
    }

    fn paths(doc: &Value) -> Vec<String> {
        let c = catalog();
        check_nodepool(doc, &c, &defined_keys(&c))
            .iter()
            .map(|f| f.path.to_string())
            .collect()
    }

    #[test]
    fn single_unsatisfiable_requirement() {
        let doc = pool(json!([
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m9"]},
            {"key": "example.com/team", "operator": "In", "values": ["a"]}
        ]));
        assert_eq!(paths(&doc), ["spec.template.spec.requirements[0]"]);
    }

    #[test]
    fn requirements_that_conflict_together() {
        let doc = pool(json!([
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
        ]));
        assert_eq!(paths(&doc), ["spec.template.spec.requirements"]);
    }

    #[test]
    fn min_values_beyond_the_catalog() {
        let doc = pool(json!([
            {"key": "karpenter.k8s.aws/instance-family", "operator": "Exists", "minValues": 3}
        ]));
        assert_eq!(
            paths(&doc),
            ["spec.template.spec.requirements[0].minValues"]
        );
        let ok = pool(json!([
            {"key": "karpenter.k8s.aws/instance-family", "operator": "Exists", "minValues": 2}
        ]));
        assert!(paths(&ok).is_empty());
    }
}
