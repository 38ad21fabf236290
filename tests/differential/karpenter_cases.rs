//! Karpenter v1.14.1's own CEL cases of the EC2NodeClass: every object
//! that an `It(...)` or a table `Entry(...)` of
//! `pkg/apis/v1/ec2nodeclass_validation_cel_test.go` (aws/karpenter-provider-aws
//! at v1.14.1) creates, written as JSON the way Go's encoding writes it
//! (fields without `omitempty` as `null`, Quantities and Durations in their
//! canonical form), with the verdict that test expects. The fields
//! dovetail once refused (issue 43) are among them: `networkInterfaces`,
//! `connectionTracking`, `cpuOptions` and `volumeInitializationRate`;
//! `placementGroupSelector` and `ipPrefixCount` have no CEL case there.
//! The update cases (role immutability) are left out: `validate` checks one
//! revision at a time.
//!
//! The admission differential sends each to the testbed's API server,
//! which serves dovetail's CRDs (equal to v1.14.1's but for descriptions:
//! `api::conformance`), whose verdict must be the one the test expects (the
//! port is faithful); and to `dovetail validate` and the served API, whose
//! verdicts must be the API server's.

use serde_json::{Value, json};

/// The node class of the suite's `BeforeEach`, as Go sends it:
/// `capacityReservationSelectorTerms` has no `omitempty`.
fn base() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "karpenter-case"},
        "spec": {
            "amiFamily": "AL2023",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "capacityReservationSelectorTerms": null,
            "role": "role-1",
            "securityGroupSelectorTerms": [{"tags": {"*": "*"}}],
            "subnetSelectorTerms": [{"tags": {"*": "*"}}],
        }
    })
}

/// The base with `spec` set into its spec (a `null` is sent as `null`,
/// as Go sends a nil slice of a field without `omitempty`).
fn with(spec: Value) -> Value {
    let mut doc = base();
    for (k, v) in spec.as_object().expect("an object") {
        doc["spec"][k] = v.clone();
    }
    doc
}

/// `doc` without the spec's `keys` (Go leaves out an `omitempty` field at
/// its zero value).
fn omit(mut doc: Value, keys: &[&str]) -> Value {
    for k in keys {
        doc["spec"].as_object_mut().expect("spec").remove(*k);
    }
    doc
}

/// A network interface as Go writes one (no `omitempty` on its fields).
fn interface(card: i32, device: i32, kind: &str) -> Value {
    json!({"networkCardIndex": card, "deviceIndex": device, "interfaceType": kind})
}

/// The block-device cases' node class: the base's selectors and role with
/// `mappings`, and no `amiFamily`.
fn mappings(mappings: Value) -> Value {
    omit(
        with(json!({"blockDeviceMappings": mappings})),
        &["amiFamily"],
    )
}

/// One EBS mapping, `map-device-N`, of `volumeSize` and `extra` (a root
/// volume when `root`; Go leaves `rootVolume: false` out).
fn ebs(n: u32, volume_size: &str, root: bool, extra: Value) -> Value {
    let mut ebs = json!({"volumeSize": volume_size});
    for (k, v) in extra.as_object().expect("an object") {
        ebs[k] = v.clone();
    }
    let mut m = json!({"deviceName": format!("map-device-{n}"), "ebs": ebs});
    if root {
        m["rootVolume"] = json!(true);
    }
    m
}

/// The AMI families of the suite, as `v1.AMIFamily*` spells them.
const FAMILIES: [&str; 7] = [
    "AL2",
    "AL2023",
    "Bottlerocket",
    "Windows2019",
    "Windows2022",
    "Windows2025",
    "Custom",
];

/// The soft eviction thresholds and grace periods of the suite's valid
/// cases (`metav1.Duration` in Go's `String()` form).
fn eviction_soft() -> Value {
    json!({
        "evictionSoft": {
            "memory.available": "5%", "nodefs.available": "10%", "nodefs.inodesFree": "15%",
            "imagefs.available": "5%", "imagefs.inodesFree": "5%", "pid.available": "5%",
        },
        "evictionSoftGracePeriod": {
            "memory.available": "1m0s", "nodefs.available": "1m30s", "nodefs.inodesFree": "5m0s",
            "imagefs.available": "1h0m0s", "imagefs.inodesFree": "24h0m0s", "pid.available": "1m0s",
        },
    })
}

/// A selector-term context's shared cases (subnets, security groups,
/// capacity reservations and AMIs say the same of their terms).
fn term_cases(field: &str, what: &str) -> Vec<(String, Value, bool)> {
    let set = |terms: Value| with(json!({ field: terms }));
    vec![
        (
            format!("should fail when a {what} selector term has no values"),
            set(json!([{}])),
            false,
        ),
        (
            format!("should fail when a {what} selector term has no tag map values"),
            // An empty tags map is left out (omitempty).
            set(json!([{}])),
            false,
        ),
        (
            format!("should fail when a {what} selector term has a tag map key that is empty"),
            set(json!([{"tags": {"test": ""}}])),
            false,
        ),
        (
            format!("should fail when a {what} selector term has a tag map value that is empty"),
            set(json!([{"tags": {"": "testvalue"}}])),
            false,
        ),
        (
            format!("should fail when the last {what} selector is invalid"),
            set(json!([
                {"tags": {"test": "testvalue"}},
                {"tags": {"test2": "testvalue2"}},
                {"tags": {"test3": "testvalue3"}},
                {"tags": {"": "testvalue4"}},
            ])),
            false,
        ),
    ]
}

/// Every case: the test's name, the object it creates, and whether the
/// test expects the create to succeed.
pub(super) fn cases() -> Vec<(String, Value, bool)> {
    let (i, efa) = ("interface", "efa-only");
    let mut cases: Vec<(String, Value, bool)> = Vec::new();
    let mut case = |name: &str, doc: Value, ok: bool| cases.push((name.to_string(), doc, ok));

    case("should succeed if just specifying role", base(), true);
    case(
        "should succeed if just specifying instance profile",
        omit(
            with(json!({"instanceProfile": "test-instance-profile"})),
            &["role"],
        ),
        true,
    );
    case(
        "should fail if specifying both instance profile and role",
        with(json!({"instanceProfile": "test-instance-profile"})),
        false,
    );
    case(
        "should fail if not specifying one of instance profile and role",
        omit(base(), &["role"]),
        false,
    );
    case("should succeed if user data is empty", base(), true);

    // AMIFamily.
    for family in FAMILIES {
        case(
            &format!("should succeed with valid families: {family}"),
            with(
                json!({"amiSelectorTerms": [{"id": "ami-0123456789abcdef"}], "amiFamily": family}),
            ),
            true,
        );
    }
    case(
        "should fail with the ubuntu family",
        with(json!({"amiSelectorTerms": [{"id": "ami-0123456789abcdef"}], "amiFamily": "Ubuntu"})),
        false,
    );
    let aliased: Vec<&str> = FAMILIES.into_iter().filter(|f| *f != "Custom").collect();
    for family in &aliased {
        let alias = format!("{}@latest", family.to_lowercase());
        case(
            &format!(
                "should succeed when the amiFamily matches amiSelectorTerms[].alias: {family} {alias}"
            ),
            with(json!({"amiSelectorTerms": [{"alias": alias}], "amiFamily": family})),
            true,
        );
        case(
            &format!(
                "should succeed when the amiFamily is custom with amiSelectorTerms[].alias: {alias}"
            ),
            with(json!({"amiSelectorTerms": [{"alias": alias}], "amiFamily": "Custom"})),
            true,
        );
        for other in &aliased {
            if other == family {
                continue;
            }
            let alias = format!("{}@latest", other.to_lowercase());
            case(
                &format!(
                    "should fail when then amiFamily does not match amiSelectorTerms[].alias: {family} {alias}"
                ),
                with(json!({"amiSelectorTerms": [{"alias": alias}], "amiFamily": family})),
                false,
            );
        }
    }
    case(
        "should fail when neither amiFamily nor an alias are specified",
        omit(
            with(json!({"amiSelectorTerms": [{"id": "ami-01234567890abcdef"}]})),
            &["amiFamily"],
        ),
        false,
    );

    // Tags.
    case("should succeed when tags are empty", base(), true);
    case(
        "should succeed if tags aren't in restricted tag keys",
        with(json!({"tags": {
            "karpenter.sh/custom-key": "value",
            "karpenter.sh/managed": "true",
            "kubernetes.io/role/key": "value",
        }})),
        true,
    );
    for (key, value) in [
        ("karpenter.sh/nodepool", "value"),
        ("kubernetes.io/cluster/test", "value"),
        ("eks:eks-cluster-name", "test"),
        ("karpenter.k8s.aws/ec2nodeclass", "test"),
        ("karpenter.sh/nodeclaim", "test"),
    ] {
        case(
            &format!("should fail if tags contain a restricted domain key: {key}"),
            with(json!({"tags": {key: value}})),
            false,
        );
    }

    // Subnets and security groups.
    for (field, what, id) in [
        ("subnetSelectorTerms", "subnet", "subnet-12345749"),
        (
            "securityGroupSelectorTerms",
            "security group",
            "sg-12345749",
        ),
    ] {
        case(
            &format!("should succeed with a valid {what} selector on tags"),
            with(json!({field: [{"tags": {"test": "testvalue"}}]})),
            true,
        );
        case(
            &format!("should succeed with a valid {what} selector on id"),
            with(json!({field: [{"id": id}]})),
            true,
        );
        case(
            &format!("should fail when {what} selector terms is set to nil"),
            with(json!({field: null})),
            false,
        );
        case(
            &format!("should fail when no {what} selector terms exist"),
            with(json!({field: []})),
            false,
        );
        for c in term_cases(field, what) {
            case(&c.0, c.1, c.2);
        }
        case(
            "should fail when specifying id with tags",
            with(json!({field: [{"id": id, "tags": {"test": "testvalue"}}]})),
            false,
        );
    }
    let sg = |terms: Value| with(json!({"securityGroupSelectorTerms": terms}));
    case(
        "should succeed with a valid security group selector on name",
        sg(json!([{"name": "testname"}])),
        true,
    );
    case(
        "should fail when specifying id with name",
        sg(json!([{"id": "sg-12345749", "name": "my-security-group"}])),
        false,
    );
    case(
        "should fail when specifying name with tags",
        sg(json!([{"name": "my-security-group", "tags": {"test": "testvalue"}}])),
        false,
    );

    // Capacity reservations.
    let cr = |terms: Value| with(json!({"capacityReservationSelectorTerms": terms}));
    for (name, terms, ok) in [
        (
            "should succeed with a valid capacity reservation selector on tags",
            json!([{"tags": {"test": "testvalue"}}]),
            true,
        ),
        (
            "should succeed with a valid capacity reservation selector on id",
            json!([{"id": "cr-12345749"}]),
            true,
        ),
        (
            "should succeed for a valid ownerID",
            json!([{"ownerID": "012345678901", "tags": {"test": "testvalue"}}]),
            true,
        ),
        (
            "should fail with a capacity reservation selector on a malformed id",
            json!([{"id": "r-12345749"}]),
            false,
        ),
        (
            "should succeed when capacity group selector terms is set to nil",
            Value::Null,
            true,
        ),
        (
            "should fail when specifying id with tags in a single term",
            json!([{"id": "cr-12345749", "tags": {"test": "testvalue"}}]),
            false,
        ),
        (
            "should fail when specifying id with ownerID in a single term",
            json!([{"ownerID": "012345678901", "id": "cr-12345749"}]),
            false,
        ),
        (
            "should fail when the ownerID is malformed",
            json!([{"ownerID": "01234567890", "tags": {"test": "testvalue"}}]),
            false,
        ),
        (
            "should fail when the ownerID is set by itself",
            json!([{"ownerID": "012345678901"}]),
            false,
        ),
        (
            "should succeed with a valid instanceMatchCriteria 'open'",
            json!([{"instanceMatchCriteria": "open"}]),
            true,
        ),
        (
            "should succeed with a valid instanceMatchCriteria 'targeted'",
            json!([{"instanceMatchCriteria": "targeted"}]),
            true,
        ),
        (
            "should succeed with instanceMatchCriteria combined with tags",
            json!([{"instanceMatchCriteria": "open", "tags": {"test": "testvalue"}}]),
            true,
        ),
        (
            "should succeed with instanceMatchCriteria combined with ownerID and tags",
            json!([{"instanceMatchCriteria": "targeted", "ownerID": "012345678901", "tags": {"test": "testvalue"}}]),
            true,
        ),
        (
            "should fail with invalid instanceMatchCriteria value",
            json!([{"instanceMatchCriteria": "invalid"}]),
            false,
        ),
        (
            "should fail when specifying id with instanceMatchCriteria",
            json!([{"id": "cr-12345749", "instanceMatchCriteria": "open"}]),
            false,
        ),
    ] {
        case(name, cr(terms), ok);
    }
    for c in term_cases("capacityReservationSelectorTerms", "capacity reservation") {
        case(&c.0, c.1, c.2);
    }

    // AMI selector terms.
    let ami = |terms: Value| with(json!({"amiSelectorTerms": terms}));
    for (name, terms, ok) in [
        (
            "should succeed with a valid ami selector on alias",
            json!([{"alias": "al2023@latest"}]),
            true,
        ),
        (
            "should succeed with a valid ami selector on tags",
            json!([{"tags": {"test": "testvalue"}}]),
            true,
        ),
        (
            "should succeed with a valid ami selector on id",
            json!([{"id": "ami-12345749"}]),
            true,
        ),
        (
            "should succeed with a valid ami selector on name",
            json!([{"name": "testname"}]),
            true,
        ),
        (
            "should succeed with a valid ami selector on name and owner",
            json!([{"name": "testname", "owner": "testowner"}]),
            true,
        ),
        (
            "should succeed when an ami selector term has an owner key with tags",
            json!([{"owner": "testowner", "tags": {"test": "testvalue"}}]),
            true,
        ),
        (
            "should fail when specifying alias with other terms",
            json!([{"alias": "al2023@latest"}, {"id": "ami-1234749"}]),
            false,
        ),
        (
            "should fail for an alias with an invalid family",
            json!([{"alias": "ubuntu@latest"}]),
            false,
        ),
    ] {
        case(name, ami(terms), ok);
    }
    for c in term_cases("amiSelectorTerms", "ami") {
        case(&c.0, c.1, c.2);
    }
    let others = [
        ("alias", json!({"alias": "al2023@latest"})),
        ("id", json!({"id": "ami-1234749"})),
        ("tags", json!({"tags": {"test": "testvalue"}})),
        ("name", json!({"name": "my-custom-ami"})),
        ("owner", json!({"owner": "123456789"})),
    ];
    for (first, key) in [
        (json!({"id": "ami-1234749"}), "id"),
        (json!({"alias": "al2023@latest"}), "alias"),
    ] {
        for (entry, extra) in &others {
            if *entry == key {
                continue;
            }
            let mut term = first.clone();
            for (k, v) in extra.as_object().expect("an object") {
                term[k] = v.clone();
            }
            case(
                &format!("should fail when specifying {key} with other fields: {entry}"),
                ami(json!([term])),
                false,
            );
        }
    }
    for (alias, family) in [
        ("al2@latest", "AL2"),
        ("al2@v20240625", "AL2"),
        ("al2023@latest", "AL2023"),
        ("al2023@v20240625", "AL2023"),
        ("bottlerocket@latest", "Bottlerocket"),
        ("bottlerocket@1.10.0", "Bottlerocket"),
        ("windows2019@latest", "Windows2019"),
        ("windows2022@latest", "Windows2022"),
        ("windows2025@latest", "Windows2025"),
    ] {
        case(
            &format!("should succeed for valid aliases: {alias}"),
            with(json!({"amiFamily": family, "amiSelectorTerms": [{"alias": alias}]})),
            true,
        );
    }
    for alias in ["@latest", "al2023", "al2023@", "al2023-latest"] {
        case(
            &format!("should fail for incorrectly formatted aliases: {alias}"),
            ami(json!([{"alias": alias}])),
            false,
        );
    }
    for alias in [
        "windows2019@v1.0.0",
        "windows2022@v1.0.0",
        "windows2025@v1.0.0",
    ] {
        case(
            &format!(
                "should fail when specifying non-latest versions with Windows aliases: {alias}"
            ),
            ami(json!([{"alias": alias}])),
            false,
        );
    }

    // Kubelet.
    let kubelet = |k: Value| with(json!({"kubelet": k}));
    let minute = |key: &str| json!({ key: "1m0s" });
    for (name, k, ok) in [
        (
            "should fail on kubeReserved with invalid keys",
            json!({"kubeReserved": {"pods": "2"}}),
            false,
        ),
        (
            "should fail on systemReserved with invalid keys",
            json!({"systemReserved": {"pods": "2"}}),
            false,
        ),
        (
            "should succeed on evictionHard with valid keys",
            json!({"evictionHard": {
                "memory.available": "5%", "nodefs.available": "10%", "nodefs.inodesFree": "15%",
                "imagefs.available": "5%", "imagefs.inodesFree": "5%", "pid.available": "5%",
            }}),
            true,
        ),
        (
            "should fail on evictionHard with invalid keys",
            json!({"evictionHard": {"memory": "5%"}}),
            false,
        ),
        (
            "should fail on invalid formatted percentage value in evictionHard",
            json!({"evictionHard": {"memory.available": "5%3"}}),
            false,
        ),
        (
            "should fail on invalid percentage value (too large) in evictionHard",
            json!({"evictionHard": {"memory.available": "110%"}}),
            false,
        ),
        (
            "should fail on invalid quantity value in evictionHard",
            json!({"evictionHard": {"memory.available": "110GB"}}),
            false,
        ),
        (
            "should succeed on evictionSoft with valid keys",
            eviction_soft(),
            true,
        ),
        (
            "should fail on evictionSoft with invalid keys",
            json!({"evictionSoft": {"memory": "5%"}, "evictionSoftGracePeriod": minute("memory")}),
            false,
        ),
        (
            "should fail on invalid formatted percentage value in evictionSoft",
            json!({"evictionSoft": {"memory.available": "5%3"}, "evictionSoftGracePeriod": minute("memory.available")}),
            false,
        ),
        (
            "should fail on invalid percentage value (too large) in evictionSoft",
            json!({"evictionSoft": {"memory.available": "110%"}, "evictionSoftGracePeriod": minute("memory.available")}),
            false,
        ),
        (
            "should fail on invalid quantity value in evictionSoft",
            json!({"evictionSoft": {"memory.available": "110GB"}, "evictionSoftGracePeriod": minute("memory.available")}),
            false,
        ),
        (
            "should fail when eviction soft doesn't have matching grace period",
            json!({"evictionSoft": {"memory.available": "200Mi"}}),
            false,
        ),
        (
            "should succeed on a valid imageGCHighThresholdPercent",
            json!({"imageGCHighThresholdPercent": 10}),
            true,
        ),
        (
            "should fail when imageGCHighThresholdPercent is less than imageGCLowThresholdPercent",
            json!({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}),
            false,
        ),
        (
            "should succeed on evictionSoftGracePeriod with valid keys",
            eviction_soft(),
            true,
        ),
        (
            "should fail on evictionSoftGracePeriod with invalid keys",
            json!({"evictionSoftGracePeriod": minute("memory")}),
            false,
        ),
        (
            "should fail when eviction soft grace period doesn't have matching threshold",
            json!({"evictionSoftGracePeriod": minute("memory.available")}),
            false,
        ),
    ] {
        case(name, kubelet(k), ok);
    }

    // Metadata options.
    let metadata = |m: Value| with(json!({"metadataOptions": m}));
    for (name, m, ok) in [
        (
            "should succeed for valid inputs",
            json!({"httpEndpoint": "disabled", "httpProtocolIPv6": "enabled", "httpPutResponseHopLimit": 34, "httpTokens": "optional"}),
            true,
        ),
        (
            "should fail for invalid for HTTPEndpoint",
            json!({"httpEndpoint": "test"}),
            false,
        ),
        (
            "should fail for invalid for HTTPProtocolIPv6",
            json!({"httpProtocolIPv6": "test"}),
            false,
        ),
        (
            "should fail for invalid for HTTPPutResponseHopLimit",
            json!({"httpPutResponseHopLimit": -5}),
            false,
        ),
        (
            "should fail for invalid for HTTPTokens",
            json!({"httpTokens": "test"}),
            false,
        ),
    ] {
        case(name, metadata(m), ok);
    }

    // Block device mappings.
    let none = json!({});
    for (name, list, ok) in [
        (
            "should succeed if more than one root volume is specified",
            json!([
                ebs(1, "500G", true, none.clone()),
                ebs(2, "50T", false, none.clone())
            ]),
            true,
        ),
        (
            "should succeed for valid VolumeSize in G",
            json!([ebs(1, "58G", false, none.clone())]),
            true,
        ),
        (
            "should succeed for valid VolumeSize in T",
            json!([ebs(1, "45T", false, none.clone())]),
            true,
        ),
        (
            "should fail if more than one root volume is specified",
            json!([
                ebs(1, "50G", true, none.clone()),
                ebs(2, "50G", true, none.clone())
            ]),
            false,
        ),
        (
            "should fail VolumeSize is less then 1Gi/1G",
            json!([ebs(1, "1m", false, none.clone())]),
            false,
        ),
        (
            "should fail VolumeSize is greater then 64T",
            json!([ebs(1, "100T", false, none.clone())]),
            false,
        ),
        (
            "should fail for VolumeSize that do not parse into quantity values",
            json!([ebs(1, "0", false, none.clone())]),
            false,
        ),
        (
            "should fail if VolumeInitializationRate set but SnapshotID not specified",
            json!([ebs(1, "0", false, json!({"volumeInitializationRate": 100}))]),
            false,
        ),
        (
            "should fail if VolumeInitializationRate too low",
            json!([ebs(
                1,
                "0",
                false,
                json!({"snapshotID": "snap-1", "volumeInitializationRate": 99})
            )]),
            false,
        ),
        (
            "should fail if VolumeInitializationRate too high",
            json!([ebs(
                1,
                "0",
                false,
                json!({"snapshotID": "snap-1", "volumeInitializationRate": 888})
            )]),
            false,
        ),
    ] {
        case(name, mappings(list), ok);
    }

    // Network interfaces.
    let nics = |list: Value| with(json!({"networkInterfaces": list}));
    for (name, list, ok) in [
        (
            "should succeed with valid multiple network interfaces",
            json!([
                interface(0, 0, i),
                interface(0, 1, efa),
                interface(1, 0, efa),
                interface(1, 1, i)
            ]),
            true,
        ),
        // An empty list is left out (omitempty).
        (
            "should succeed when network interfaces is empty",
            Value::Null,
            true,
        ),
        (
            "should fail with an invalid interface type",
            json!([interface(0, 0, "efa")]),
            false,
        ),
        (
            "should fail with a negative NetworkCardIndex",
            json!([interface(0, 0, i), interface(-1, 0, i)]),
            false,
        ),
        (
            "should fail with a negative DeviceIndex",
            json!([interface(-1, 0, i), interface(0, -1, i)]),
            false,
        ),
        (
            "should fail with duplicate Network Interface and Device Index fields",
            json!([
                interface(0, 0, i),
                interface(0, 1, efa),
                interface(1, 0, i),
                interface(1, 0, efa)
            ]),
            false,
        ),
        (
            "should fail with no primary network interface",
            json!([interface(0, 1, i)]),
            false,
        ),
        (
            "should fail when primary network interface is not ENA",
            json!([interface(0, 0, efa)]),
            false,
        ),
        (
            "should fail when multiple EFA devices on one network card",
            json!([
                interface(0, 0, i),
                interface(1, 0, efa),
                interface(1, 1, efa)
            ]),
            false,
        ),
    ] {
        let doc = match list {
            Value::Null => base(),
            list => nics(list),
        };
        case(name, doc, ok);
    }

    // Connection tracking.
    let conntrack = |c: Value| with(json!({"connectionTracking": c}));
    for (name, c, ok) in [
        (
            "should fail when connectionTracking is specified with no fields set",
            json!({}),
            false,
        ),
        (
            "should succeed with valid tcpEstablishedTimeout",
            json!({"tcpEstablishedTimeout": 60}),
            true,
        ),
        (
            "should succeed with valid udpStreamTimeout",
            json!({"udpStreamTimeout": 120}),
            true,
        ),
        (
            "should succeed with valid udpTimeout",
            json!({"udpTimeout": 45}),
            true,
        ),
        (
            "should succeed with all valid connection tracking settings",
            json!({"tcpEstablishedTimeout": 432000, "udpStreamTimeout": 180, "udpTimeout": 60}),
            true,
        ),
        (
            "should fail when tcpEstablishedTimeout is below minimum (60s)",
            json!({"tcpEstablishedTimeout": 59}),
            false,
        ),
        (
            "should fail when tcpEstablishedTimeout is above maximum (432000s)",
            json!({"tcpEstablishedTimeout": 432001}),
            false,
        ),
        (
            "should fail when udpStreamTimeout is below minimum (60s)",
            json!({"udpStreamTimeout": 59}),
            false,
        ),
        (
            "should fail when udpStreamTimeout is above maximum (180s)",
            json!({"udpStreamTimeout": 181}),
            false,
        ),
        (
            "should fail when udpTimeout is below minimum (30s)",
            json!({"udpTimeout": 29}),
            false,
        ),
        (
            "should fail when udpTimeout is above maximum (60s)",
            json!({"udpTimeout": 61}),
            false,
        ),
    ] {
        case(name, conntrack(c), ok);
    }
    case(
        "should fail if role is not defined",
        omit(base(), &["role"]),
        false,
    );

    // CPU options.
    for (name, c, ok) in [
        (
            "should succeed with nestedVirtualization enabled",
            json!({"nestedVirtualization": "enabled"}),
            true,
        ),
        (
            "should succeed with nestedVirtualization disabled",
            json!({"nestedVirtualization": "disabled"}),
            true,
        ),
        (
            "should fail with invalid nestedVirtualization value",
            json!({"nestedVirtualization": "invalid"}),
            false,
        ),
        ("should succeed with empty CPUOptions", json!({}), true),
    ] {
        case(name, with(json!({"cpuOptions": c})), ok);
    }

    cases
        .into_iter()
        .map(|(name, doc, ok)| (format!("Karpenter v1.14.1 CEL case {name:?}"), doc, ok))
        .collect()
}
