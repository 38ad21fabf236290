//! Karpenter v1.14.1's NodeOverlay validation cases
//! (pkg/apis/v1alpha1/nodeoverlay_validation_test.go: the CRD's schema and
//! CEL rules, `Create`, and `RuntimeValidate`), ported to
//! [`check_object`], which makes both checks as `validate` and the
//! in-memory API server's admission do. Each test is named after its
//! `It`; a table's entries are one test.

use serde_json::{Value, json};

use super::check_object;
use crate::api::ApiKind;

/// The suite's `BeforeEach` overlay with `spec` fields replaced.
fn overlay(spec: Value) -> Value {
    let mut base = json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "overlay"},
        "spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}]},
    });
    for (k, v) in spec.as_object().unwrap() {
        base["spec"][k] = v.clone();
    }
    base
}

fn reqs(list: Value) -> Value {
    overlay(json!({ "requirements": list }))
}

fn accepted(doc: &Value) -> bool {
    let errors = check_object(ApiKind::NodeOverlay, doc);
    errors.is_empty()
}

fn assert_accepted(doc: Value) {
    let errors = check_object(ApiKind::NodeOverlay, &doc);
    assert!(errors.is_empty(), "{doc}: {errors:?}");
}

fn assert_rejected(doc: Value) {
    assert!(!accepted(&doc), "{doc} was accepted");
}

#[test]
fn should_fail_for_no_values_for_in_operator() {
    assert_rejected(reqs(json!([{"key": "Test", "operator": "In"}])));
}

#[test]
fn should_fail_for_no_values_for_notin_operator() {
    assert_rejected(reqs(json!([{"key": "Test", "operator": "NotIn"}])));
}

#[test]
fn should_succeed_for_valid_requirement_keys() {
    assert_accepted(reqs(json!([{"key": "Test", "operator": "Exists"}])));
    assert_accepted(reqs(json!([
        {"key": "Test", "operator": "Exists"},
        {"key": "test.com/Test", "operator": "Exists"},
        {"key": "test.com.com/test", "operator": "Exists"},
        {"key": "key-only", "operator": "Exists"},
    ])));
}

#[test]
fn should_fail_for_invalid_requirement_keys() {
    for key in [
        "test.com.com}",
        "Test.com/test",
        "test/test/test",
        "test/",
        "/test",
    ] {
        assert_rejected(reqs(json!([{"key": key, "operator": "Exists"}])));
    }
}

#[test]
fn should_allow_for_the_karpenter_sh_nodepool_label() {
    assert_accepted(reqs(
        json!([{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["silly-name"]}]),
    ));
}

#[test]
fn should_fail_at_runtime_for_requirement_keys_that_are_too_long() {
    let long = "a".repeat(250);
    for key in [
        format!("test.com.test.{long}/test"),
        format!("test.com.test/test-{long}"),
    ] {
        assert_rejected(reqs(json!([{"key": key, "operator": "Exists"}])));
    }
}

#[test]
fn should_allow_supported_ops() {
    let zone = "topology.kubernetes.io/zone";
    assert_accepted(reqs(json!([
        {"key": zone, "operator": "In", "values": ["test"]},
        {"key": zone, "operator": "Gt", "values": ["1"]},
        {"key": zone, "operator": "Lt", "values": ["1"]},
        {"key": zone, "operator": "Gte", "values": ["1"]},
        {"key": zone, "operator": "Lte", "values": ["1"]},
        {"key": zone, "operator": "NotIn", "values": ["1"]},
        {"key": zone, "operator": "Exists"},
    ])));
}

#[test]
fn should_fail_for_unsupported_ops() {
    assert_rejected(reqs(json!([
        {"key": "topology.kubernetes.io/zone", "operator": "unknown", "values": ["test"]},
    ])));
}

#[test]
fn should_fail_for_restricted_domains() {
    assert_rejected(reqs(
        json!([{"key": "karpenter.sh/test", "operator": "In", "values": ["test"]}]),
    ));
}

#[test]
fn should_allow_kubernetes_domains_exceptions() {
    for domain in ["kubernetes.io", "k8s.io"] {
        assert_accepted(reqs(
            json!([{"key": format!("{domain}/test"), "operator": "In", "values": ["test"]}]),
        ));
    }
}

#[test]
fn should_allow_kubernetes_subdomains_exceptions() {
    for domain in ["kubernetes.io", "k8s.io"] {
        assert_accepted(reqs(json!([
            {"key": format!("subdomain.{domain}/test"), "operator": "In", "values": ["test"]},
        ])));
    }
}

#[test]
fn should_allow_well_known_label_exceptions() {
    // Core's well-known labels but the NodePool and capacity type (the
    // reference's test leaves those out: capacity type is validated at
    // runtime against its known values).
    for label in [
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "node.kubernetes.io/windows-build",
    ] {
        assert_accepted(reqs(
            json!([{"key": label, "operator": "In", "values": ["test"]}]),
        ));
    }
}

#[test]
fn should_allow_non_empty_set_after_removing_overlapped_value() {
    let zone = "topology.kubernetes.io/zone";
    assert_accepted(reqs(json!([
        {"key": zone, "operator": "In", "values": ["test", "foo"]},
        {"key": zone, "operator": "NotIn", "values": ["test", "bar"]},
    ])));
}

#[test]
fn should_allow_empty_requirements() {
    assert_accepted(reqs(json!([{"key": "test", "operator": "Exists"}])));
}

fn bad_bounds(ops: [&str; 2]) {
    for op in ops {
        for values in [json!([]), json!(["1", "2"]), json!(["a"]), json!(["-1"])] {
            assert_rejected(reqs(json!([
                {"key": "topology.kubernetes.io/zone", "operator": op, "values": values},
            ])));
        }
    }
}

#[test]
fn should_fail_with_invalid_gt_or_lt_values() {
    bad_bounds(["Gt", "Lt"]);
}

#[test]
fn should_fail_with_invalid_gte_or_lte_values() {
    bad_bounds(["Gte", "Lte"]);
}

#[test]
fn shout_not_be_able_to_set_both_price_and_priceadjustment() {
    assert_rejected(overlay(
        json!({"price": "0.432", "priceAdjustment": "+10%"}),
    ));
}

/// The `priceAdjustment` context's "Invalid Input" table (which the
/// reference writes into `price`) and the `price` context's.
#[test]
fn invalid_input() {
    for input in [
        "+42",
        ".5",
        "42.",
        "42%",
        "3,14",
        "1e10",
        "0x42",
        "forty-two",
        "42a",
        "42 ",
        " 42",
        "42.0.0",
        "-",
        ".",
        "-100.0%",
        "-101.1%",
        "-129",
        "-.42",
    ] {
        assert_rejected(overlay(json!({ "price": input })));
    }
}

#[test]
fn should_not_allow_an_unsigned_priceadjustment_percentage_integer_or_float() {
    for input in ["1%", "1", "1.3"] {
        assert_rejected(overlay(json!({ "priceAdjustment": input })));
    }
}

#[test]
fn should_allow_signed_priceadjustment_values() {
    // "should allow positive percentage value for priceAdjustment field",
    // "... negative percentage less then 0%", "... -100%", "... positive
    // percentage greater then 100%" (with an integer), "... positive /
    // negative integer value", "... positive / negative float value".
    for input in [
        "+1%", "-10%", "-100%", "+150.5%", "+150%", "+43", "-43", "+34.43", "-34.43",
    ] {
        assert_accepted(overlay(json!({ "priceAdjustment": input })));
    }
}

#[test]
fn should_allow_integer_and_float_value() {
    for input in ["43", "34.43"] {
        assert_accepted(overlay(json!({ "price": input })));
    }
}

#[test]
fn should_allow_custom_resources() {
    assert_accepted(overlay(json!({"capacity": {"smarter-devices/fuse": "1"}})));
}

#[test]
fn should_not_allow_cpu_memory_or_pod_resources_override() {
    for (resource, q) in [("cpu", "1"), ("memory", "34Gi"), ("pods", "324")] {
        assert_rejected(overlay(json!({"capacity": {resource: q}})));
    }
}
