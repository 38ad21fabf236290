//! NodeOverlay documents → [`Overlay`]s, and the one place overlays are
//! applied to the NodePools the core solves over ([`apply_overlays`]):
//! `plan` and the controller (provisioning, consolidation's prices, drift,
//! the lower bound) both call it on the NodePools they built.

use serde_json::Value;

use crate::api::ApiKind;
use crate::model::overlay::{self, Outcome, Overlay, PoolTypes, PriceChange};
use crate::model::{Requirements, Resources};
use crate::scheduling::NodePoolSpec;

/// The overlay a NodeOverlay document describes. One that fails the
/// checks `validate` makes (the reference's runtime validation among
/// them) is returned with `invalid` set, so that it is reported
/// (`ValidationSucceeded=False`, reason `RuntimeValidation`) and not
/// applied.
pub fn overlay(doc: &Value) -> Overlay {
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut out = Overlay {
        name,
        weight: doc
            .pointer("/spec/weight")
            .and_then(Value::as_i64)
            .and_then(|w| i32::try_from(w).ok())
            .unwrap_or(0),
        requirements: Requirements::new(),
        price: None,
        capacity: Resources::new(),
        invalid: None,
    };
    let errors = crate::config::validate::check_object(ApiKind::NodeOverlay, doc);
    if !errors.is_empty() {
        out.invalid = Some(errors.join("; "));
        return out;
    }
    if let Err(e) = fill(&mut out, doc) {
        out.invalid = Some(e);
    }
    out
}

fn fill(out: &mut Overlay, doc: &Value) -> Result<(), String> {
    let spec = doc.get("spec").ok_or("spec is missing")?;
    if let Some(reqs) = spec.get("requirements") {
        let reqs: Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement> =
            serde_json::from_value(reqs.clone()).map_err(|e| format!("spec.requirements: {e}"))?;
        out.requirements = Requirements::from_node_selector(&reqs)
            .map_err(|e| format!("spec.requirements: {e}"))?;
    }
    let price = spec
        .get("price")
        .or_else(|| spec.get("priceAdjustment"))
        .and_then(Value::as_str);
    if let Some(p) = price {
        out.price = Some(PriceChange::parse(p)?);
    }
    if let Some(capacity) = spec.get("capacity").and_then(Value::as_object) {
        let items: Vec<(&str, &str)> = capacity
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
            .collect();
        out.capacity =
            Resources::parse(items).map_err(|(k, e)| format!("spec.capacity.{k}: {e}"))?;
    }
    Ok(())
}

/// Applies overlays to the NodePools' instance types in place (see
/// [`crate::model::overlay`]).
pub fn apply_overlays(overlays: &[Overlay], pools: &mut [NodePoolSpec]) -> Outcome {
    let mut views: Vec<PoolTypes> = pools
        .iter_mut()
        .map(|p| PoolTypes {
            name: &p.name,
            labels: &p.labels,
            types: &mut p.instance_types,
        })
        .collect();
    overlay::apply(overlays, &mut views)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn doc(spec: Value) -> Value {
        json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
               "metadata": {"name": "o"}, "spec": spec})
    }

    #[test]
    fn a_nodeoverlay_document_becomes_an_overlay() {
        let o = overlay(&doc(json!({
            "weight": 20,
            "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}],
            "priceAdjustment": "-50%",
        })));
        assert_eq!(o.invalid, None);
        assert_eq!(o.weight, 20);
        assert_eq!(o.price, Some(PriceChange::Percent(-50.0)));
        assert!(
            o.requirements
                .get("karpenter.k8s.aws/instance-family")
                .is_some_and(|r| r.has("m5") && !r.has("c5"))
        );
        let o = overlay(&doc(json!({
            "requirements": [],
            "capacity": {"hugepages-2Mi": "1Gi", "example.com/fpga": "2"},
        })));
        assert_eq!(o.weight, 0);
        assert_eq!(o.capacity.get("hugepages-2Mi"), 1 << 30);
        assert_eq!(o.capacity.get("example.com/fpga"), 2);
    }

    /// The reference's "should fail validation for invalid requirements
    /// values" and "... invalid capacity values": reported, not applied.
    #[test]
    fn should_fail_validation_for_invalid_requirements_and_capacity_values() {
        let long = format!("test.com.test/test-{}", "a".repeat(250));
        let o = overlay(&doc(json!({
            "requirements": [{"key": long, "operator": "Exists"}],
        })));
        assert!(o.invalid.is_some(), "{o:?}");
        let o = overlay(&doc(json!({
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}],
            "capacity": {"cpu": "5"},
        })));
        assert!(
            o.invalid
                .as_deref()
                .is_some_and(|e| e.contains("invalid resource restricted")),
            "{o:?}"
        );
    }
}
