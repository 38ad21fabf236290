//! Karpenter v1.14.1's CapacityBuffer CRD cases
//! (pkg/apis/autoscaling/v1beta1/suite_test.go, "Schema Validation"),
//! ported to [`check_object`] (the generated CRD's schema and CEL rules, as
//! `validate` and admission check them) and named after their `It`s. Not
//! ported: "Registration" (the CRD is generated and checked in, and
//! compared with the reference's by `api::conformance`).

use serde_json::{Value, json};

use super::check_object;
use crate::api::ApiKind;

fn buffer(spec: Value) -> Value {
    json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": "b", "namespace": "default"},
        "spec": spec,
    })
}

fn ok(spec: Value) {
    let errors = check_object(ApiKind::CapacityBuffer, &buffer(spec.clone()));
    assert!(errors.is_empty(), "{spec}: {errors:?}");
}

fn rejected(spec: Value) {
    let errors = check_object(ApiKind::CapacityBuffer, &buffer(spec.clone()));
    assert!(!errors.is_empty(), "{spec} was accepted");
}

#[test]
fn should_accept_a_valid_capacitybuffer_with_podtemplateref_and_replicas() {
    ok(json!({"podTemplateRef": {"name": "t"}, "replicas": 3}));
}

#[test]
fn should_accept_a_valid_capacitybuffer_with_podtemplateref_and_limits() {
    ok(json!({"podTemplateRef": {"name": "t"}, "limits": {"cpu": "4", "memory": "8Gi"}}));
}

#[test]
fn should_accept_a_valid_capacitybuffer_with_scalableref() {
    ok(
        json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}, "percentage": 20}),
    );
}

#[test]
fn should_accept_scalableref_with_empty_apigroup_for_core_api_group() {
    ok(
        json!({"scalableRef": {"apiGroup": "", "kind": "ReplicationController", "name": "web"}, "replicas": 1}),
    );
}

#[test]
fn should_reject_setting_both_podtemplateref_and_scalableref() {
    rejected(json!({"podTemplateRef": {"name": "t"}, "replicas": 1,
                    "scalableRef": {"kind": "Deployment", "name": "web"}}));
}

#[test]
fn should_reject_podtemplateref_without_replicas_or_limits() {
    rejected(json!({"podTemplateRef": {"name": "t"}}));
}

#[test]
fn should_reject_negative_replicas_and_percentage() {
    rejected(json!({"podTemplateRef": {"name": "t"}, "replicas": -1}));
    rejected(json!({"scalableRef": {"kind": "Deployment", "name": "web"}, "percentage": -1}));
}

#[test]
fn should_reject_empty_names_and_kinds() {
    // "should reject empty podTemplateRef name", "... scalableRef kind",
    // "... scalableRef name".
    rejected(json!({"podTemplateRef": {"name": ""}, "replicas": 1}));
    rejected(json!({"scalableRef": {"kind": "", "name": "web"}}));
    rejected(json!({"scalableRef": {"kind": "Deployment", "name": ""}}));
}

#[test]
fn should_accept_zero_replicas_and_zero_percentage() {
    ok(json!({"podTemplateRef": {"name": "t"}, "replicas": 0}));
    ok(json!({"scalableRef": {"kind": "Deployment", "name": "web"}, "percentage": 0}));
}

#[test]
fn should_set_default_provisioningstrategy() {
    let mut b: crate::api::CapacityBuffer = serde_json::from_value(buffer(
        json!({"podTemplateRef": {"name": "t"}, "replicas": 1}),
    ))
    .unwrap();
    b.apply_defaults();
    assert_eq!(
        b.spec.provisioning_strategy.as_deref(),
        Some("buffer.x-k8s.io/active-capacity")
    );
}

#[test]
fn should_accept_both_replicas_and_percentage_together() {
    ok(
        json!({"scalableRef": {"kind": "Deployment", "name": "web"}, "replicas": 2, "percentage": 10}),
    );
}

#[test]
fn should_accept_scalableref_without_replicas_or_limits() {
    ok(json!({"scalableRef": {"kind": "Deployment", "name": "web"}}));
}
