//! Tests of the types with real objects: YAML round trips, defaults (Rust
//! side against the schema defaults), and the CEL rules of the generated
//! CRDs evaluated client-side.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ec2nodeclass::{HttpTokens, MetadataOptions};
use super::nodepool::{ConsolidationPolicy, Disruption};
use super::*;

const NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
  labels: {team: platform}
spec:
  template:
    metadata:
      labels:
        billing-team: my-team
      annotations:
        example.com/owner: my-team
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      taints:
        - key: example.com/special-taint
          value: "true"
          effect: NoSchedule
      startupTaints:
        - key: example.com/another-taint
          effect: NoExecute
      expireAfter: 720h
      terminationGracePeriod: 48h
      requirements:
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["c", "m", "r"]
          minValues: 2
        - key: karpenter.k8s.aws/instance-generation
          operator: Gt
          values: ["2"]
        - key: karpenter.k8s.aws/instance-cpu
          operator: Lte
          values: ["32"]
        - key: topology.kubernetes.io/zone
          operator: NotIn
          values: ["us-west-2d"]
        - key: kubernetes.io/arch
          operator: Exists
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["spot", "on-demand", "reserved"]
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
    budgets:
      - nodes: "10%"
      - schedule: "0 9 * * mon-fri"
        duration: 8h
        nodes: "0"
        reasons: [Drifted, Underutilized]
  limits:
    cpu: "1000"
    memory: 1000Gi
  weight: 10
status:
  conditions:
    - type: Ready
      status: "True"
      lastTransitionTime: "2026-01-01T00:00:00Z"
      reason: Ready
      message: ""
      observedGeneration: 1
  nodeClassObservedGeneration: 2
  nodes: 3
  resources:
    cpu: "12"
    memory: 48Gi
"#;

const NODEPOOL_MINIMAL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: minimal}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
"#;

const NODEPOOL_STATIC: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: static}
spec:
  replicas: 4
  limits: {nodes: "10"}
  disruption: {consolidateAfter: Never, consolidationPolicy: WhenEmpty}
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
"#;

const EC2NODECLASS: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  kubelet:
    podsPerCore: 2
    maxPods: 20
    systemReserved: {cpu: 100m, memory: 100Mi, ephemeral-storage: 1Gi}
    kubeReserved: {cpu: 200m, memory: 100Mi, ephemeral-storage: 3Gi}
    evictionHard: {memory.available: 5%, nodefs.available: 10%, nodefs.inodesFree: 10%}
    evictionSoft: {memory.available: 500Mi, nodefs.available: 15%, nodefs.inodesFree: 15%}
    evictionSoftGracePeriod: {memory.available: 1m, nodefs.available: 1m30s, nodefs.inodesFree: 2m}
    evictionMaxPodGracePeriod: 60
    imageGCHighThresholdPercent: 85
    imageGCLowThresholdPercent: 80
    cpuCFSQuota: true
    clusterDNS: ["10.0.1.100"]
  amiFamily: AL2023
  subnetSelectorTerms:
    - tags: {karpenter.sh/discovery: my-cluster, environment: test}
    - id: subnet-09fa4a0a8f233a921
  securityGroupSelectorTerms:
    - tags: {karpenter.sh/discovery: my-cluster}
    - name: my-security-group
    - id: sg-063d7acfb4b06c82c
  capacityReservationSelectorTerms:
    - tags: {karpenter.sh/discovery: my-cluster}
      ownerID: "123456789012"
    - instanceMatchCriteria: open
  placementGroupSelector: {name: my-pg}
  networkInterfaces:
    - {networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}
    - {networkCardIndex: 1, deviceIndex: 0, interfaceType: efa-only}
  connectionTracking: {tcpEstablishedTimeout: 3600, udpTimeout: 30}
  cpuOptions: {nestedVirtualization: disabled}
  role: KarpenterNodeRole-my-cluster
  amiSelectorTerms:
    - alias: al2023@v20240807
  tags:
    team: team-a
    app: team-a-app
  metadataOptions:
    httpEndpoint: enabled
    httpProtocolIPv6: disabled
    httpPutResponseHopLimit: 1
    httpTokens: required
  blockDeviceMappings:
    - deviceName: /dev/xvda
      ebs:
        volumeSize: 100Gi
        volumeType: gp3
        iops: 10000
        encrypted: true
        kmsKeyID: "1234abcd-12ab-34cd-56ef-1234567890ab"
        deleteOnTermination: true
        throughput: 125
        snapshotID: snap-0123456789
        volumeInitializationRate: 100
      rootVolume: true
  instanceStorePolicy: RAID0
  userData: |
    echo "Hello world"
  detailedMonitoring: true
  associatePublicIPAddress: false
  ipPrefixCount: 2
  context: ctx-123
status:
  subnets:
    - {id: subnet-0a462d98193ff9fac, zone: us-east-2b, zoneID: use2-az2}
  securityGroups:
    - {id: sg-041513b454818610b, name: ClusterSharedNodeSecurityGroup}
  amis:
    - id: ami-01234567890123456
      name: al2023-ami
      deprecated: false
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
  capacityReservations:
    - availabilityZone: us-east-2a
      id: cr-0123456789abcdef0
      instanceMatchCriteria: open
      instanceType: p5.48xlarge
      ownerID: "123456789012"
      reservationType: capacity-block
      state: active
      endTime: "2026-02-01T00:00:00Z"
      interruptible: false
  instanceProfile: my-cluster_1234567890
  conditions:
    - {type: Ready, status: "True", lastTransitionTime: "2026-01-01T00:00:00Z", reason: Ready, message: ""}
"#;

const NODECLAIM: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-x7vzm
  labels:
    karpenter.sh/nodepool: default
    karpenter.sh/capacity-type: spot
    node.kubernetes.io/instance-type: m5.large
  finalizers: [karpenter.sh/termination]
spec:
  expireAfter: 720h
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements:
    - {key: karpenter.sh/nodepool, operator: In, values: [default]}
    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge], minValues: 1}
  resources:
    requests: {cpu: 1150m, memory: 2Gi, pods: "7"}
  taints:
    - {key: example.com/special-taint, effect: NoSchedule, timeAdded: "2026-01-01T00:00:00Z"}
status:
  allocatable: {cpu: 1930m, memory: 6903Mi, pods: "29"}
  capacity: {cpu: "2", memory: 7742Mi, pods: "29"}
  conditions:
    - {type: Launched, status: "True", lastTransitionTime: "2026-01-01T00:00:00Z", reason: Launched, message: ""}
    - {type: Drifted, status: "False", lastTransitionTime: "2026-01-01T00:00:00Z"}
  imageID: ami-08946d4d49fc3f27b
  lastPodEventTime: "2026-01-01T00:05:00Z"
  nodeName: ip-192-168-71-87.us-west-2.compute.internal
  providerID: aws:///us-west-2b/i-053c6b324e29d2275
"#;

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("test YAML parses")
}

fn parse<T: DeserializeOwned>(text: &str) -> T {
    serde_json::from_value(yaml(text)).expect("test object deserialises")
}

fn json<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("serialise")
}

/// Defaults a JSON object from its schema as the API server does: a missing
/// property with a `default` gets it, then defaulting recurses into every
/// property, the defaulted ones included.
fn default_like_apiserver(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(object) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    if let Some(default) = property.get("default")
                        && !object.contains_key(name)
                    {
                        object.insert(name.clone(), default.clone());
                    }
                }
                for (name, child) in object.iter_mut() {
                    if let Some(property) = properties.get(name) {
                        default_like_apiserver(property, child);
                    }
                }
            } else if let Some(values) =
                schema.get("additionalProperties").filter(|s| s.is_object())
            {
                object
                    .values_mut()
                    .for_each(|child| default_like_apiserver(values, child));
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                items
                    .iter_mut()
                    .for_each(|child| default_like_apiserver(item, child));
            }
        }
        _ => {}
    }
}

fn schema_defaulted<T: DeserializeOwned>(kind: ApiKind, text: &str) -> T {
    let mut value = yaml(text);
    default_like_apiserver(&openapi_schema(kind), &mut value);
    serde_json::from_value(value).expect("defaulted object deserialises")
}

fn cel_errors(kind: ApiKind, object: &Value, old: Option<&Value>) -> Vec<String> {
    match kube::core::cel::Validator::new().validate(&openapi_schema(kind), object, old) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(|e| e.message.clone()).collect(),
    }
}

#[test]
fn objects_round_trip_without_inventing_fields() {
    fn check<T: DeserializeOwned + Serialize>(text: &str) {
        let original = yaml(text);
        let typed: T = serde_json::from_value(original.clone()).expect("deserialise");
        assert_eq!(json(&typed), original);
    }
    check::<NodePool>(NODEPOOL);
    check::<NodePool>(NODEPOOL_MINIMAL);
    check::<NodePool>(NODEPOOL_STATIC);
    check::<EC2NodeClass>(EC2NODECLASS);
    check::<NodeClaim>(NODECLAIM);
}

#[test]
fn integer_quantities_are_read_as_strings() {
    let pool: NodePool = parse(&format!(
        "{NODEPOOL_MINIMAL}  limits: {{cpu: 1000, memory: 1.5}}\n"
    ));
    let limits = pool.spec.limits.expect("limits");
    assert_eq!(limits["cpu"].0, "1000");
    assert_eq!(limits["memory"].0, "1.5");
}

#[test]
fn unknown_enum_values_are_rejected_by_serde() {
    let text = NODEPOOL_STATIC.replace("WhenEmpty", "Sometimes");
    assert!(serde_json::from_value::<NodePool>(yaml(&text)).is_err());
}

#[test]
fn nodepool_defaults() {
    let mut pool: NodePool = parse(NODEPOOL_MINIMAL);
    pool.apply_defaults();
    let disruption = pool.spec.disruption.as_ref().expect("disruption");
    assert_eq!(disruption.consolidate_after, "0s");
    assert_eq!(
        disruption.consolidation_policy,
        Some(ConsolidationPolicy::WhenEmptyOrUnderutilized)
    );
    let budgets = disruption.budgets.as_ref().expect("budgets");
    assert_eq!(budgets.len(), 1);
    assert_eq!(budgets[0].nodes, "10%");
    assert_eq!(
        pool.spec.template.spec.expire_after.as_deref(),
        Some("720h")
    );
    assert_eq!(pool.spec.weight, None, "weight has no default");
}

#[test]
fn nodepool_defaults_keep_what_is_set() {
    let mut pool: NodePool = parse(NODEPOOL_STATIC);
    pool.apply_defaults();
    let disruption = pool.spec.disruption.expect("disruption");
    assert_eq!(disruption.consolidate_after, "Never");
    assert_eq!(
        disruption.consolidation_policy,
        Some(ConsolidationPolicy::WhenEmpty)
    );
    assert_eq!(disruption.budgets.expect("budgets")[0].nodes, "10%");
}

#[test]
fn budget_nodes_default_when_read() {
    let pool: NodePool = parse(&format!(
        "{NODEPOOL_MINIMAL}  disruption:\n    consolidateAfter: 0s\n    budgets: [{{schedule: '@daily', duration: 1h}}]\n"
    ));
    assert_eq!(
        pool.spec
            .disruption
            .expect("disruption")
            .budgets
            .expect("budgets")[0]
            .nodes,
        "10%"
    );
}

#[test]
fn spelled_out_defaults_equal_omitted_ones() {
    let explicit = format!(
        "{NODEPOOL_MINIMAL}      expireAfter: 720h\n  disruption:\n    consolidateAfter: 0s\n    consolidationPolicy: WhenEmptyOrUnderutilized\n    budgets: [{{nodes: 10%}}]\n"
    );
    let mut a: NodePool = parse(NODEPOOL_MINIMAL);
    let mut b: NodePool = parse(&explicit);
    assert_ne!(a, b);
    a.apply_defaults();
    b.apply_defaults();
    assert_eq!(a, b);

    let mut a = EC2NodeClass::test("a");
    let mut b = EC2NodeClass::test("a");
    b.spec.metadata_options = Some(MetadataOptions {
        http_tokens: Some(HttpTokens::Required),
        ..MetadataOptions::default()
    });
    a.apply_defaults();
    b.apply_defaults();
    assert_eq!(a, b);
}

#[test]
fn apply_defaults_is_idempotent() {
    let mut pool: NodePool = parse(NODEPOOL);
    pool.apply_defaults();
    let once = pool.clone();
    pool.apply_defaults();
    assert_eq!(pool, once);
}

/// The Rust-side defaults are exactly the schema defaults.
#[test]
fn rust_defaults_match_schema_defaults() {
    for text in [NODEPOOL, NODEPOOL_MINIMAL, NODEPOOL_STATIC] {
        let mut typed: NodePool = parse(text);
        typed.apply_defaults();
        assert_eq!(typed, schema_defaulted(ApiKind::NodePool, text), "{text}");
    }
    let minimal_status = format!("{NODEPOOL_MINIMAL}status: {{}}\n");
    let mut typed: NodePool = parse(&minimal_status);
    typed.apply_defaults();
    assert_eq!(typed, schema_defaulted(ApiKind::NodePool, &minimal_status));

    let minimal_class = serde_saphyr::to_string(&EC2NodeClass::test("minimal")).expect("yaml");
    let partial_options = EC2NODECLASS
        .replace("    httpEndpoint: enabled\n", "")
        .replace("    httpPutResponseHopLimit: 1\n", "")
        .replace(
            "      reservationType: capacity-block\n      state: active\n",
            "",
        );
    for text in [
        EC2NODECLASS,
        minimal_class.as_str(),
        partial_options.as_str(),
    ] {
        let mut typed: EC2NodeClass = parse(text);
        typed.apply_defaults();
        assert_eq!(
            typed,
            schema_defaulted(ApiKind::EC2NodeClass, text),
            "{text}"
        );
    }

    let minimal_claim = serde_saphyr::to_string(&NodeClaim::test("minimal")).expect("yaml");
    for text in [NODECLAIM, minimal_claim.as_str()] {
        let mut typed: NodeClaim = parse(text);
        typed.apply_defaults();
        assert_eq!(typed, schema_defaulted(ApiKind::NodeClaim, text), "{text}");
    }
}

#[test]
fn metadata_options_default_to_imdsv2() {
    let options = MetadataOptions::defaulted();
    assert_eq!(options.http_tokens, Some(HttpTokens::Required));
    assert_eq!(options.http_put_response_hop_limit, Some(1));
    assert_eq!(Disruption::defaulted().consolidate_after, "0s");
}

#[test]
fn examples_pass_cel() {
    for (kind, text) in [
        (ApiKind::NodePool, NODEPOOL),
        (ApiKind::NodePool, NODEPOOL_MINIMAL),
        (ApiKind::NodePool, NODEPOOL_STATIC),
        (ApiKind::EC2NodeClass, EC2NODECLASS),
        (ApiKind::NodeClaim, NODECLAIM),
    ] {
        let object = yaml(text);
        assert_eq!(
            cel_errors(kind, &object, None),
            Vec::<String>::new(),
            "{text}"
        );
        assert_eq!(
            cel_errors(kind, &object, Some(&object)),
            Vec::<String>::new(),
            "{text}"
        );
    }
    for (kind, object) in [
        (ApiKind::NodePool, json(&NodePool::test("t"))),
        (ApiKind::NodeClaim, json(&NodeClaim::test("t"))),
        (ApiKind::EC2NodeClass, json(&EC2NodeClass::test("t"))),
    ] {
        assert_eq!(
            cel_errors(kind, &object, None),
            Vec::<String>::new(),
            "{kind}"
        );
    }
}

#[test]
fn cel_restricts_nodepool_labels_and_requirements() {
    let pool = NodePool::test("a").with_requirement(NodeSelectorRequirementWithMinValues::new(
        LABEL_NODEPOOL,
        Operator::In,
        &["a"],
    ));
    let errors = cel_errors(ApiKind::NodePool, &json(&pool), None);
    assert_eq!(errors, [r#"label "karpenter.sh/nodepool" is restricted"#]);

    let mut pool = NodePool::test("a");
    pool.spec.template.metadata = Some(nodepool::NodeClaimTemplateMetadata {
        annotations: None,
        labels: Some(
            [
                ("karpenter.k8s.aws/instance-family", "m5"),
                ("karpenter.k8s.aws/made-up", "x"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ),
    });
    let errors = cel_errors(ApiKind::NodePool, &json(&pool), None);
    assert_eq!(
        errors,
        [r#"label domain "karpenter.k8s.aws" is restricted"#]
    );

    // NodeClaims carry the nodepool requirement Karpenter adds.
    let mut claim = NodeClaim::test("a");
    claim
        .spec
        .requirements
        .push(NodeSelectorRequirementWithMinValues::new(
            LABEL_NODEPOOL,
            Operator::In,
            &["a"],
        ));
    assert_eq!(
        cel_errors(ApiKind::NodeClaim, &json(&claim), None),
        Vec::<String>::new()
    );
}

#[test]
fn cel_checks_requirement_values() {
    let mut in_without_values =
        NodeSelectorRequirementWithMinValues::new("team", Operator::In, &[]);
    in_without_values.values = Some(Vec::new());
    let mut min_values = NodeSelectorRequirementWithMinValues::new("team", Operator::In, &["a"]);
    min_values.min_values = Some(2);
    let gt_two_values =
        NodeSelectorRequirementWithMinValues::new("size", Operator::Gt, &["1", "2"]);
    for (requirement, message) in [
        (
            in_without_values,
            "requirements with operator 'In' must have a value defined",
        ),
        (
            gt_two_values,
            "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        ),
        (
            min_values,
            "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        ),
    ] {
        let pool = NodePool::test("a").with_requirement(requirement);
        assert_eq!(cel_errors(ApiKind::NodePool, &json(&pool), None), [message]);
    }
}

#[test]
fn cel_transition_rules_use_the_old_object() {
    let dynamic = json(&NodePool::test("a"));
    let mut static_pool = NodePool::test("a");
    static_pool.spec.replicas = Some(2);
    let static_pool = json(&static_pool);
    assert_eq!(
        cel_errors(ApiKind::NodePool, &static_pool, None),
        Vec::<String>::new()
    );
    assert_eq!(
        cel_errors(ApiKind::NodePool, &static_pool, Some(&dynamic)),
        [
            "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"
        ]
    );

    let mut other_kind = NodePool::test("a");
    other_kind.spec.template.spec.node_class_ref.kind = "OtherNodeClass".to_string();
    assert_eq!(
        cel_errors(ApiKind::NodePool, &json(&other_kind), Some(&dynamic)),
        ["nodeClassRef.kind is immutable"]
    );

    let claim = NodeClaim::test("a");
    let mut changed = claim.clone();
    changed.spec.expire_after = Some("1h".to_string());
    assert_eq!(
        cel_errors(ApiKind::NodeClaim, &json(&changed), Some(&json(&claim))),
        ["spec is immutable"]
    );
}

#[test]
fn cel_static_nodepools_only_limit_nodes() {
    let pool = NodePool::test("a")
        .with_limits(&[("cpu", "10")])
        .with_weight(5);
    let mut static_pool = pool.clone();
    static_pool.spec.replicas = Some(1);
    let mut errors = cel_errors(ApiKind::NodePool, &json(&static_pool), None);
    errors.sort();
    assert_eq!(
        errors,
        [
            "'weight' is not supported on static NodePools",
            "only 'limits.nodes' is supported on static NodePools"
        ]
    );
    assert_eq!(
        cel_errors(ApiKind::NodePool, &json(&pool), None),
        Vec::<String>::new()
    );
}

#[test]
fn cel_checks_ec2nodeclass_rules() {
    let mut both = EC2NodeClass::test("a");
    both.spec.instance_profile = Some("profile".to_string());
    assert_eq!(
        cel_errors(ApiKind::EC2NodeClass, &json(&both), None),
        ["must specify exactly one of ['role', 'instanceProfile']"]
    );

    let mut wrong_family = EC2NodeClass::test("a");
    wrong_family.spec.ami_family = Some(ec2nodeclass::AmiFamily::AL2);
    assert_eq!(
        cel_errors(ApiKind::EC2NodeClass, &json(&wrong_family), None),
        ["if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias"]
    );

    let mut pinned_windows = EC2NodeClass::test("a");
    pinned_windows.spec.ami_selector_terms[0].alias = Some("windows2022@v1".to_string());
    assert_eq!(
        cel_errors(ApiKind::EC2NodeClass, &json(&pinned_windows), None),
        ["windows families may only specify version 'latest'"]
    );

    let mut restricted_tag = EC2NodeClass::test("a");
    restricted_tag.spec.tags =
        Some([("karpenter.sh/nodeclaim".to_string(), "x".to_string())].into());
    assert_eq!(
        cel_errors(ApiKind::EC2NodeClass, &json(&restricted_tag), None),
        ["tag contains a restricted tag matching karpenter.sh/nodeclaim"]
    );
}

#[test]
fn accessors() {
    let pool: NodePool = parse(NODEPOOL);
    assert_eq!(pool.weight(), 10);
    assert!(!pool.is_static());
    assert_eq!(pool.requirements().len(), 6);
    assert!(pool.condition(CONDITION_READY).expect("ready").is_true());
    assert_eq!(pool.condition("Other"), None);
    let pool: NodePool = parse(NODEPOOL_STATIC);
    assert_eq!(pool.weight(), 0);
    assert!(pool.is_static());

    let claim: NodeClaim = parse(NODECLAIM);
    assert_eq!(claim.nodepool_name(), Some("default"));
    let drifted = claim.condition(CONDITION_DRIFTED).expect("drifted");
    assert!(!drifted.is_true());
    assert_eq!((drifted.reason(), drifted.message()), ("", ""));
    assert_eq!(NodeClaim::test("a").nodepool_name(), None);
}

#[test]
fn ami_family_is_resolved_from_the_alias() {
    use ec2nodeclass::AmiFamily;
    let mut class = EC2NodeClass::test("a");
    assert_eq!(class.resolved_ami_family(), Some(AmiFamily::AL2023));
    class.spec.ami_family = Some(AmiFamily::Custom);
    assert_eq!(class.resolved_ami_family(), Some(AmiFamily::Custom));
    class.spec.ami_family = None;
    class.spec.ami_selector_terms[0].alias = Some("bottlerocket@v1.20.0".to_string());
    assert_eq!(class.resolved_ami_family(), Some(AmiFamily::Bottlerocket));
    class.spec.ami_selector_terms[0].alias = None;
    class.spec.ami_selector_terms[0].id = Some("ami-0123".to_string());
    assert_eq!(class.resolved_ami_family(), None);
    assert_eq!(
        AmiFamily::from_alias("windows2025@latest"),
        Some(AmiFamily::Windows2025)
    );
    assert_eq!(AmiFamily::from_alias("ubuntu@latest"), None);
}
