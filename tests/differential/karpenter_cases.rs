//! Karpenter v1.14.1's own CEL cases for the EC2NodeClass fields dovetail
//! once refused and launches again (issue 43): `networkInterfaces`,
//! `connectionTracking`, `cpuOptions` and an EBS volume's
//! `volumeInitializationRate`, with the role and instance-profile cases
//! that every node class meets. Each is the object one `It(...)` of
//! `pkg/apis/v1/ec2nodeclass_validation_cel_test.go` (aws/karpenter-provider-aws
//! at v1.14.1) creates, written as JSON the way Go's encoding writes it,
//! with the verdict that test expects. `placementGroupSelector` and
//! `ipPrefixCount` have no CEL case there.
//!
//! The admission differential sends each to the testbed's API server,
//! which serves dovetail's CRDs (equal to v1.14.1's but for descriptions:
//! `api::conformance`), whose verdict must be the one the test expects (the
//! port is faithful); and to `dovetail validate` and the served API, whose
//! verdicts must be the API server's.

use serde_json::{Value, json};

/// The node class of the suite's `BeforeEach`.
fn base() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "karpenter-case"},
        "spec": {
            "amiFamily": "AL2023",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "role-1",
            "securityGroupSelectorTerms": [{"tags": {"*": "*"}}],
            "subnetSelectorTerms": [{"tags": {"*": "*"}}],
        }
    })
}

/// The base with `spec` merged into its spec (a `null` removes a key).
fn with(spec: Value) -> Value {
    let mut doc = base();
    for (k, v) in spec.as_object().expect("an object") {
        match v {
            Value::Null => {
                doc["spec"].as_object_mut().expect("spec").remove(k);
            }
            v => doc["spec"][k] = v.clone(),
        }
    }
    doc
}

/// A network interface as Go writes one (no `omitempty` on its fields).
fn interface(card: i32, device: i32, kind: &str) -> Value {
    json!({"networkCardIndex": card, "deviceIndex": device, "interfaceType": kind})
}

/// The `volumeInitializationRate` cases' node class: the base's selectors
/// and role, one non-root EBS mapping (`volumeSize: 0`, Go's zero
/// Quantity) with `ebs` extended by `extra`.
fn mapping(extra: Value) -> Value {
    let mut ebs = json!({"volumeSize": "0"});
    for (k, v) in extra.as_object().expect("an object") {
        ebs[k] = v.clone();
    }
    let mut doc = with(json!({
        "blockDeviceMappings": [{"deviceName": "map-device-1", "ebs": ebs}],
    }));
    doc["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("amiFamily");
    doc
}

/// Every case: the test's name, the object it creates, and whether the
/// test expects the create to succeed.
pub(super) fn cases() -> Vec<(String, Value, bool)> {
    let (i, efa) = ("interface", "efa-only");
    let cases: Vec<(&str, Value, bool)> = vec![
        ("should succeed if just specifying role", base(), true),
        (
            "should succeed if just specifying instance profile",
            with(json!({"role": null, "instanceProfile": "test-instance-profile"})),
            true,
        ),
        (
            "should fail if specifying both instance profile and role",
            with(json!({"instanceProfile": "test-instance-profile"})),
            false,
        ),
        (
            "should fail if not specifying one of instance profile and role",
            with(json!({"role": null})),
            false,
        ),
        (
            "should fail if VolumeInitializationRate set but SnapshotID not specified",
            mapping(json!({"volumeInitializationRate": 100})),
            false,
        ),
        (
            "should fail if VolumeInitializationRate too low",
            mapping(json!({"snapshotID": "snap-1", "volumeInitializationRate": 99})),
            false,
        ),
        (
            "should fail if VolumeInitializationRate too high",
            mapping(json!({"snapshotID": "snap-1", "volumeInitializationRate": 888})),
            false,
        ),
        (
            "should succeed with valid multiple network interfaces",
            with(json!({"networkInterfaces": [
                interface(0, 0, i), interface(0, 1, efa), interface(1, 0, efa), interface(1, 1, i),
            ]})),
            true,
        ),
        (
            "should succeed when network interfaces is empty",
            with(json!({"networkInterfaces": []})),
            true,
        ),
        (
            "should fail with an invalid interface type",
            with(json!({"networkInterfaces": [interface(0, 0, "efa")]})),
            false,
        ),
        (
            "should fail with a negative NetworkCardIndex",
            with(json!({"networkInterfaces": [interface(0, 0, i), interface(-1, 0, i)]})),
            false,
        ),
        (
            "should fail with a negative DeviceIndex",
            with(json!({"networkInterfaces": [interface(-1, 0, i), interface(0, -1, i)]})),
            false,
        ),
        (
            "should fail with duplicate Network Interface and Device Index fields",
            with(json!({"networkInterfaces": [
                interface(0, 0, i), interface(0, 1, efa), interface(1, 0, i), interface(1, 0, efa),
            ]})),
            false,
        ),
        (
            "should fail with no primary network interface",
            with(json!({"networkInterfaces": [interface(0, 1, i)]})),
            false,
        ),
        (
            "should fail when primary network interface is not ENA",
            with(json!({"networkInterfaces": [interface(0, 0, efa)]})),
            false,
        ),
        (
            "should fail when multiple EFA devices on one network card",
            with(json!({"networkInterfaces": [
                interface(0, 0, i), interface(1, 0, efa), interface(1, 1, efa),
            ]})),
            false,
        ),
        (
            "should fail when connectionTracking is specified with no fields set",
            with(json!({"connectionTracking": {}})),
            false,
        ),
        (
            "should succeed with valid tcpEstablishedTimeout",
            with(json!({"connectionTracking": {"tcpEstablishedTimeout": 60}})),
            true,
        ),
        (
            "should succeed with valid udpStreamTimeout",
            with(json!({"connectionTracking": {"udpStreamTimeout": 120}})),
            true,
        ),
        (
            "should succeed with valid udpTimeout",
            with(json!({"connectionTracking": {"udpTimeout": 45}})),
            true,
        ),
        (
            "should succeed with all valid connection tracking settings",
            with(json!({"connectionTracking": {
                "tcpEstablishedTimeout": 432000, "udpStreamTimeout": 180, "udpTimeout": 60,
            }})),
            true,
        ),
        (
            "should fail when tcpEstablishedTimeout is below minimum (60s)",
            with(json!({"connectionTracking": {"tcpEstablishedTimeout": 59}})),
            false,
        ),
        (
            "should fail when tcpEstablishedTimeout is above maximum (432000s)",
            with(json!({"connectionTracking": {"tcpEstablishedTimeout": 432001}})),
            false,
        ),
        (
            "should fail when udpStreamTimeout is below minimum (60s)",
            with(json!({"connectionTracking": {"udpStreamTimeout": 59}})),
            false,
        ),
        (
            "should fail when udpStreamTimeout is above maximum (180s)",
            with(json!({"connectionTracking": {"udpStreamTimeout": 181}})),
            false,
        ),
        (
            "should fail when udpTimeout is below minimum (30s)",
            with(json!({"connectionTracking": {"udpTimeout": 29}})),
            false,
        ),
        (
            "should fail when udpTimeout is above maximum (60s)",
            with(json!({"connectionTracking": {"udpTimeout": 61}})),
            false,
        ),
        (
            "should fail if role is not defined",
            with(json!({"role": null})),
            false,
        ),
        (
            "should succeed with nestedVirtualization enabled",
            with(json!({"cpuOptions": {"nestedVirtualization": "enabled"}})),
            true,
        ),
        (
            "should succeed with nestedVirtualization disabled",
            with(json!({"cpuOptions": {"nestedVirtualization": "disabled"}})),
            true,
        ),
        (
            "should fail with invalid nestedVirtualization value",
            with(json!({"cpuOptions": {"nestedVirtualization": "invalid"}})),
            false,
        ),
        (
            "should succeed with empty CPUOptions",
            with(json!({"cpuOptions": {}})),
            true,
        ),
    ];
    cases
        .into_iter()
        .map(|(name, doc, ok)| (format!("Karpenter v1.14.1 CEL case {name:?}"), doc, ok))
        .collect()
}
