use serde_json::json;

use super::*;

#[test]
fn the_committed_descriptors_hold_every_message_the_encoding_names() {
    for name in [
        UNKNOWN,
        WATCH_EVENT,
        "k8s.io.apimachinery.pkg.runtime.TypeMeta",
        "k8s.io.apimachinery.pkg.runtime.RawExtension",
    ] {
        assert!(POOL.get_message_by_name(name).is_some(), "{name}");
    }
    for (group, dir) in GROUPS {
        assert!(
            POOL.all_messages()
                .any(|m| m.package_name() == format!("k8s.io.api.{dir}.v1")),
            "no messages for group {group:?}"
        );
    }
    for (api_version, kind) in [
        ("v1", "Pod"),
        ("v1", "Namespace"),
        ("v1", "Secret"),
        ("v1", "ConfigMapList"),
        ("v1", "Status"),
        ("apps/v1", "DeleteOptions"),
        ("apps/v1", "Deployment"),
        ("authentication.k8s.io/v1", "TokenRequest"),
        ("storage.k8s.io/v1", "VolumeAttachment"),
        ("coordination.k8s.io/v1", "Lease"),
        ("policy/v1", "Eviction"),
        ("autoscaling/v1", "Scale"),
    ] {
        assert!(
            message_for(api_version, kind).is_some(),
            "{api_version} {kind}"
        );
    }
}

#[test]
fn structs_embedded_inline_are_marked_in_the_descriptors() {
    let inline = |message_name: &str, field: &str| {
        let fd = message(message_name).get_field_by_name(field).unwrap();
        is_inline(&fd)
    };
    assert!(inline("k8s.io.api.core.v1.Probe", "handler"));
    assert!(inline("k8s.io.api.core.v1.Volume", "volumeSource"));
    assert!(inline(
        "k8s.io.api.core.v1.ConfigMapKeySelector",
        "localObjectReference"
    ));
    assert!(!inline("k8s.io.api.core.v1.Volume", "name"));
}

/// Go writes a value field with `omitempty` even when unset, and reads
/// its zero as unset; a pointer's zero is a value.
#[test]
fn a_zero_is_unset_where_go_reads_it_so() {
    let set =
        |m: &mut DynamicMessage, name: &str, v: prost_reflect::Value| m.set_field_by_name(name, v);
    let mut port = DynamicMessage::new(message("k8s.io.api.core.v1.ContainerPort"));
    set(&mut port, "containerPort", prost_reflect::Value::I32(80));
    set(&mut port, "hostPort", prost_reflect::Value::I32(0));
    set(&mut port, "name", text(""));
    assert_eq!(to_json(&port), json!({"containerPort": 80}));
    let mut spec = DynamicMessage::new(message("k8s.io.api.apps.v1.DeploymentSpec"));
    set(&mut spec, "replicas", prost_reflect::Value::I32(0));
    set(&mut spec, "minReadySeconds", prost_reflect::Value::I32(0));
    set(&mut spec, "paused", prost_reflect::Value::Bool(false));
    assert_eq!(to_json(&spec), json!({"replicas": 0}));
    let mut claim = DynamicMessage::new(message("k8s.io.api.core.v1.PersistentVolumeClaimSpec"));
    set(&mut claim, "storageClassName", text(""));
    assert_eq!(to_json(&claim), json!({"storageClassName": ""}));
    assert!(OMIT_ZERO.len() > 100, "{} fields", OMIT_ZERO.len());
}

#[test]
fn custom_resources_and_lookalike_groups_have_no_message() {
    assert!(message_for("karpenter.sh/v1", "NodePool").is_none());
    assert!(message_for("apps.example.com/v1", "Deployment").is_none());
    assert!(message_for("v1", "").is_none());
    assert!(
        encode(
            &json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "a"}})
        )
        .is_none()
    );
}

/// A Deployment with every special type in it, written in protobuf and
/// read back, is the JSON it was.
#[test]
fn a_deployment_reads_back_as_it_was_written() {
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web", "namespace": "prod", "uid": "u-1", "resourceVersion": "12",
            "creationTimestamp": "2026-11-29T01:02:03Z",
            "labels": {"app": "web"},
            "annotations": {"empty": ""},
            "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}],
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 45,
                    "containers": [{
                        "name": "web", "image": "nginx",
                        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                    }],
                    "volumes": [
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "config", "configMap": {"name": "settings", "optional": true}},
                    ],
                    "automountServiceAccountToken": false,
                },
            },
        },
    });
    let bytes = encode(&deployment)
        .expect("a built-in kind")
        .expect("encodes");
    assert!(bytes.starts_with(b"k8s\0"));
    assert_eq!(decode(&bytes).unwrap(), deployment);
}

#[test]
fn times_keep_their_precision_and_a_zero_time_is_left_out() {
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "leader", "namespace": "dovetail"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2026-11-29T01:02:03.123456Z"},
    });
    let bytes = encode(&lease).unwrap().unwrap();
    assert_eq!(decode(&bytes).unwrap(), lease);

    // Go writes a zero, non-pointer Time as an empty message.
    let mut meta = DynamicMessage::new(message("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta"));
    meta.set_field_by_name("name", text("a"));
    meta.set_field_by_name("namespace", text(""));
    meta.set_field_by_name(
        "creationTimestamp",
        prost_reflect::Value::Message(DynamicMessage::new(message(
            "k8s.io.apimachinery.pkg.apis.meta.v1.Time",
        ))),
    );
    assert_eq!(to_json(&meta), json!({"name": "a"}));
}

#[test]
fn lists_statuses_and_secrets_are_written_as_their_messages() {
    let list = json!({
        "apiVersion": "v1", "kind": "SecretList", "metadata": {"resourceVersion": "7"},
        "items": [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque", "data": {"k": "AAH/"}}],
    });
    let back = decode(&encode(&list).unwrap().unwrap()).unwrap();
    // Items carry no type of their own in protobuf, as in Go.
    assert_eq!(
        back["items"][0],
        json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"k": "AAH/"}})
    );
    let status = json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "reason": "NotFound", "code": 404, "message": "configmaps \"x\" not found", "details": {"name": "x", "kind": "configmaps"}});
    assert_eq!(decode(&encode(&status).unwrap().unwrap()).unwrap(), status);
}

#[test]
fn a_watch_frame_is_a_length_and_an_event_whose_object_is_enveloped() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}});
    let frame = watch_frame("ADDED", &cm).unwrap().unwrap();
    let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 4);
    let event = DynamicMessage::decode(message(WATCH_EVENT), &frame[4..]).unwrap();
    assert_eq!(
        event.get_field_by_name("type").unwrap().as_str(),
        Some("ADDED")
    );
    let object = event.get_field_by_name("object").unwrap();
    let raw = object
        .as_message()
        .unwrap()
        .get_field_by_name("raw")
        .unwrap();
    assert_eq!(decode(raw.as_bytes().unwrap()).unwrap(), cm);
}

#[test]
fn bad_bodies_are_refused_with_the_reason() {
    assert!(
        decode(b"{\"kind\":\"Pod\"}")
            .unwrap_err()
            .contains("k8s\\0")
    );
    assert!(
        decode(b"k8s\0\xff\xff\xff")
            .unwrap_err()
            .contains("envelope")
    );
    let mut envelope = DynamicMessage::new(message(UNKNOWN));
    let mut type_meta = DynamicMessage::new(message("k8s.io.apimachinery.pkg.runtime.TypeMeta"));
    type_meta.set_field_by_name("apiVersion", text("karpenter.sh/v1"));
    type_meta.set_field_by_name("kind", text("NodePool"));
    envelope.set_field_by_name("typeMeta", prost_reflect::Value::Message(type_meta));
    let mut body = MAGIC.to_vec();
    envelope.encode(&mut body).unwrap();
    assert!(decode(&body).unwrap_err().contains("NodePool"));
    let err = encode(&json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": "web"}}))
        .unwrap()
        .unwrap_err();
    assert!(err.contains("spec.containers"), "{err}");
}

#[test]
fn durations_are_written_as_go_writes_them() {
    for (nanos, text) in [
        (0, "0s"),
        (1, "1ns"),
        (1_500, "1.5µs"),
        (300_000_000, "300ms"),
        (1_500_000_000, "1.5s"),
        (90_000_000_000, "1m30s"),
        (5_400_000_000_000, "1h30m0s"),
        (-2_000_000_000, "-2s"),
    ] {
        assert_eq!(go_duration(nanos), text);
    }
}
