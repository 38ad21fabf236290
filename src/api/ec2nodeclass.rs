//! EC2NodeClass (`karpenter.k8s.aws/v1`): the AWS-specific configuration of
//! the nodes a NodePool launches (AMIs, subnets, security groups, IAM,
//! block devices, kubelet settings, instance metadata options).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::common::{Condition, QUANTITY_PATTERN};

/// A kubelet eviction threshold: a percentage or a quantity.
const EVICTION_THRESHOLD_PATTERN: &str = r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%||(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$";
/// The eviction signals the kubelet settings accept.
const EVICTION_SIGNALS: &str = "['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']";

/// The CEL rule shared by every selector term's `tags`.
fn selector_tags_rules() -> Value {
    json!([{"message": "empty tag keys or values aren't supported", "rule": "self.all(k, k != '' && self[k] != '')"}])
}

/// The CEL rule restricting the keys of an eviction map.
fn eviction_keys_rule(field: &str) -> Value {
    json!([{
        "message": format!("valid keys for {field} are {EVICTION_SIGNALS}"),
        "rule": format!("self.all(x, x in {EVICTION_SIGNALS})"),
    }])
}

/// The CEL rules of a reserved-resources map.
fn reserved_rules(field: &str) -> Value {
    json!([
        {
            "message": format!("valid keys for {field} are ['cpu','memory','ephemeral-storage','pid']"),
            "rule": "self.all(x, x=='cpu' || x=='memory' || x=='ephemeral-storage' || x=='pid')",
        },
        {
            "message": format!("{field} value cannot be a negative resource quantity"),
            "rule": "self.all(x, !self[x].startsWith('-'))",
        },
    ])
}

/// The rule tying `amiFamily` to the family of an alias term.
fn alias_family_rule(alias: &str, family: &str) -> Value {
    let article = if family.starts_with('A') { "an" } else { "a" };
    json!({
        "message": format!("if set, amiFamily must be '{family}' or 'Custom' when using {article} {family} alias"),
        "rule": format!("!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == '{alias}') ? (self.amiFamily == 'Custom' || self.amiFamily == '{family}') : true)"),
    })
}

/// The spec-level CEL rules of an EC2NodeClass.
fn spec_rules() -> Value {
    let mut rules = vec![json!({
        "message": "must specify exactly one of ['role', 'instanceProfile']",
        "rule": "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))",
    })];
    for (alias, family) in [
        ("al2", "AL2"),
        ("al2023", "AL2023"),
        ("bottlerocket", "Bottlerocket"),
        ("windows2019", "Windows2019"),
        ("windows2022", "Windows2022"),
        ("windows2025", "Windows2025"),
    ] {
        rules.push(alias_family_rule(alias, family));
    }
    rules.push(json!({
        "message": "must specify amiFamily if amiSelectorTerms does not contain an alias",
        "rule": "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)",
    }));
    Value::Array(rules)
}

/// The default instance metadata options: IMDSv2 only, hop limit 1.
fn metadata_options_default() -> Value {
    json!({
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    })
}

/// The desired state of an EC2NodeClass: the AWS configuration of nodes.
// kube takes one `printcolumn(...)` per column; clippy reads the repeated
// `type_ = ...` inside them as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    plural = "ec2nodeclasses",
    singular = "ec2nodeclass",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    category = "karpenter",
    status = "EC2NodeClassStatus",
    derive = "PartialEq",
    doc = "EC2NodeClass is the Schema for the EC2NodeClass API",
    annotation("controller-gen.kubebuilder.io/version", "v0.21.0"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Role",
        type_ = "string",
        json_path = ".spec.role",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = spec_rules()))]
pub struct EC2NodeClassSpec {
    /// The user data format and default block devices. Optional with an
    /// alias term (inferred from it), required otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AmiFamily>,
    /// AMI selector terms; the terms are ORed.
    #[schemars(length(min = 1, max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "message": "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
            "rule": "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))",
        },
        {
            "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            "rule": "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))",
        },
        {
            "message": "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            "rule": "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))",
        },
        {
            "message": "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
            "rule": "!(self.exists(x, has(x.alias)) && self.size() != 1)",
        },
    ]))]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// Whether instances get public IP addresses.
    #[serde(
        rename = "associatePublicIPAddress",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// Block device mappings of the provisioned nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "message": "must have only one blockDeviceMappings with rootVolume",
        "rule": "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1",
    }]))]
    pub block_device_mappings: Option<Vec<BlockDeviceMapping>>,
    /// Capacity reservation selector terms; the terms are ORed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "message": "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
            "rule": "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))",
        },
        {
            "message": "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
            "rule": "!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)))",
        },
    ]))]
    pub capacity_reservation_selector_terms: Option<Vec<CapacityReservationSelectorTerm>>,
    /// Idle connection tracking timeouts of the ENIs Karpenter provisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// The reserved `Context` field of the EC2 fleet APIs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// CPU options of the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
    /// Whether detailed monitoring is enabled for the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// The instance profile the instances use; exclusive with `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"message": "instanceProfile cannot be empty", "rule": "self != ''"}]))]
    pub instance_profile: Option<String>,
    /// How instance-store disks are handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// The number of IPv4 prefixes assigned to the network interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ip_prefix_count: Option<i32>,
    /// Kubelet settings of the provisioned nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Instance metadata service options of the launch template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = metadata_options_default()))]
    pub metadata_options: Option<MetadataOptions>,
    /// Network interfaces attached to the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 150))]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "message": "networkInterfaces must include a primary interface with interfaceType='interface'",
            "rule": "self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && x.interfaceType == 'interface')",
        },
        {
            "message": "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card",
            "rule": "self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only').size() == 1))",
        },
    ]))]
    pub network_interfaces: Option<Vec<NetworkInterface>>,
    /// The placement group to launch into, by name or id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// The IAM role the nodes use; exclusive with `instanceProfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"message": "role cannot be empty", "rule": "self != ''"}]))]
    pub role: Option<String>,
    /// Security group selector terms; the terms are ORed.
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"message": "securityGroupSelectorTerms cannot be empty", "rule": "self.size() != 0"},
        {"message": "expected at least one, got none, ['tags', 'id', 'name']", "rule": "self.all(x, has(x.tags) || has(x.id) || has(x.name))"},
        {
            "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
            "rule": "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))",
        },
        {
            "message": "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
            "rule": "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))",
        },
    ]))]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// Subnet selector terms; the terms are ORed.
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"message": "subnetSelectorTerms cannot be empty", "rule": "self.size() != 0"},
        {"message": "expected at least one, got none, ['tags', 'id']", "rule": "self.all(x, has(x.tags) || has(x.id))"},
        {
            "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
            "rule": "!self.all(x, has(x.id) && has(x.tags))",
        },
    ]))]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Tags applied to EC2 resources (instances, launch templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"message": "empty tag keys aren't supported", "rule": "self.all(k, k != '')"},
        {"message": "tag contains a restricted tag matching eks:eks-cluster-name", "rule": "self.all(k, k !='eks:eks-cluster-name')"},
        {"message": "tag contains a restricted tag matching kubernetes.io/cluster/", "rule": "self.all(k, !k.startsWith('kubernetes.io/cluster') )"},
        {"message": "tag contains a restricted tag matching karpenter.sh/nodepool", "rule": "self.all(k, k != 'karpenter.sh/nodepool')"},
        {"message": "tag contains a restricted tag matching karpenter.sh/nodeclaim", "rule": "self.all(k, k !='karpenter.sh/nodeclaim')"},
        {"message": "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass", "rule": "self.all(k, k !='karpenter.k8s.aws/ec2nodeclass')"},
    ]))]
    pub tags: Option<BTreeMap<String, String>>,
    /// User data merged by Karpenter into the node bootstrap, in the format
    /// of the AMI family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
}

/// The AMI family: user data format and default block devices.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum AmiFamily {
    AL2,
    AL2023,
    Bottlerocket,
    Custom,
    Windows2019,
    Windows2022,
    Windows2025,
}

impl AmiFamily {
    /// The family of an AMI alias (`family@version`), if it names one.
    pub fn from_alias(alias: &str) -> Option<AmiFamily> {
        let family = alias.split_once('@').map_or(alias, |(family, _)| family);
        Some(match family {
            "al2" => AmiFamily::AL2,
            "al2023" => AmiFamily::AL2023,
            "bottlerocket" => AmiFamily::Bottlerocket,
            "windows2019" => AmiFamily::Windows2019,
            "windows2022" => AmiFamily::Windows2022,
            "windows2025" => AmiFamily::Windows2025,
            _ => return None,
        })
    }
}

/// Selection of an AMI; the fields of one term are ANDed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    /// An EKS-optimized AMI as `family@version`, e.g. `al2023@latest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"message": "'alias' is improperly formatted, must match the format 'family@version'", "rule": "self.matches('^[a-zA-Z0-9]+@.+$')"},
        {
            "message": "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
            "rule": "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022','windows2025']",
        },
        {
            "message": "windows families may only specify version 'latest'",
            "rule": "self.split('@')[0] in ['windows2019','windows2022','windows2025'] ? self.split('@')[1] == 'latest' : true",
        },
    ]))]
    pub alias: Option<String>,
    /// The AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("ami-[0-9a-z]+"))]
    pub id: Option<String>,
    /// The AMI name (not the Name tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The AMI owner: an account id, `self`, `amazon` or `aws-marketplace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The name or ARN of the SSM parameter holding the image id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
    /// Tags that select AMIs; `*` selects every value of a key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 20, "x-kubernetes-validations" = selector_tags_rules()))]
    pub tags: Option<BTreeMap<String, String>>,
}

/// An EBS-backed or instance-store block device.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// The device name, e.g. `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The EBS volume set up at launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// Whether this device is mounted as the kubelet root directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
}

/// The parameters of an EBS volume.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"message": "snapshotID or volumeSize must be defined", "rule": "has(self.snapshotID) || has(self.volumeSize)"},
    {
        "message": "snapshotID must be set when volumeInitializationRate is set",
        "rule": "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')",
    },
]))]
pub struct BlockDevice {
    /// Whether the volume is deleted on instance termination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Whether the volume is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS (io1, io2, gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// The KMS key used for encryption.
    #[serde(rename = "kmsKeyID", default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// The snapshot the volume is created from.
    #[serde(
        rename = "snapshotID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    /// Throughput of a gp3 volume in MiB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// Snapshot download rate in MiB/s; only with `snapshotID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
    /// The volume size in `Gi`, `G`, `Ti` or `T`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(
        r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$"
    ))]
    pub volume_size: Option<String>,
    /// The EBS volume type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<VolumeType>,
}

/// An EBS volume type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    Standard,
    Io1,
    Io2,
    Gp2,
    Sc1,
    St1,
    Gp3,
}

/// Selection of capacity reservations; the fields of one term are ANDed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    /// The capacity reservation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("^cr-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// How instances are matched to the reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<InstanceMatchCriteria>,
    /// The owning account id.
    #[serde(rename = "ownerID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("^[0-9]{12}$"))]
    pub owner_id: Option<String>,
    /// Tags that select reservations; `*` selects every value of a key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 20, "x-kubernetes-validations" = selector_tags_rules()))]
    pub tags: Option<BTreeMap<String, String>>,
}

/// Which launches a capacity reservation accepts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMatchCriteria {
    Open,
    Targeted,
}

/// Idle connection tracking timeouts, in seconds.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "message": "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
    "rule": "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)",
}]))]
pub struct ConnectionTracking {
    /// Timeout of idle established TCP connections (60 to 432000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 432000))]
    pub tcp_established_timeout: Option<i32>,
    /// Timeout of idle UDP stream flows (60 to 180).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 180))]
    pub udp_stream_timeout: Option<i32>,
    /// Timeout of idle unidirectional UDP flows (30 to 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 60))]
    pub udp_timeout: Option<i32>,
}

/// CPU options of the instances.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuOptions {
    /// Whether nested virtualization is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<EnabledDisabled>,
}

/// A switch written `enabled` or `disabled`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EnabledDisabled {
    Enabled,
    Disabled,
}

/// How instance-store disks are handled.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum InstanceStorePolicy {
    RAID0,
}

/// The subset of the kubelet configuration Karpenter supports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "message": "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
        "rule": "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ?  self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent  : true",
    },
    {
        "message": "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
        "rule": "has(self.evictionSoft) ? self.evictionSoft.all(e, (e in self.evictionSoftGracePeriod)):true",
    },
    {
        "message": "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
        "rule": "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, (e in self.evictionSoft)):true",
    },
]))]
pub struct KubeletConfiguration {
    /// IP addresses of the cluster DNS servers.
    #[serde(
        rename = "clusterDNS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_dns: Option<Vec<String>>,
    /// Whether CPU CFS quota is enforced for containers with CPU limits.
    #[serde(
        rename = "cpuCFSQuota",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
    /// Hard eviction thresholds by signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "additionalProperties" = {"type": "string", "pattern": EVICTION_THRESHOLD_PATTERN},
        "x-kubernetes-validations" = eviction_keys_rule("evictionHard"),
    ))]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// Maximum grace period in seconds when evicting on soft thresholds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Soft eviction thresholds by signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "additionalProperties" = {"type": "string", "pattern": EVICTION_THRESHOLD_PATTERN},
        "x-kubernetes-validations" = eviction_keys_rule("evictionSoft"),
    ))]
    pub eviction_soft: Option<BTreeMap<String, String>>,
    /// Grace periods of the soft eviction thresholds by signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = eviction_keys_rule("evictionSoftGracePeriod")))]
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    /// Disk usage percent above which image garbage collection always runs.
    #[serde(
        rename = "imageGCHighThresholdPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage percent below which image garbage collection never runs.
    #[serde(
        rename = "imageGCLowThresholdPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Resources reserved for Kubernetes system components.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "additionalProperties" = {"type": "string", "pattern": QUANTITY_PATTERN},
        "x-kubernetes-validations" = reserved_rules("kubeReserved"),
    ))]
    pub kube_reserved: Option<BTreeMap<String, String>>,
    /// Override of the maximum number of pods per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_pods: Option<i32>,
    /// Override of the number of pods per CPU core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods_per_core: Option<i32>,
    /// Resources reserved for OS system daemons and kernel memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "additionalProperties" = {"type": "string", "pattern": QUANTITY_PATTERN},
        "x-kubernetes-validations" = reserved_rules("systemReserved"),
    ))]
    pub system_reserved: Option<BTreeMap<String, String>>,
}

/// Instance metadata service options of the launch template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// Whether the metadata endpoint is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "enabled"))]
    pub http_endpoint: Option<EnabledDisabled>,
    /// Whether the IPv6 metadata endpoint is enabled.
    #[serde(
        rename = "httpProtocolIPv6",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = "disabled"))]
    pub http_protocol_ipv6: Option<EnabledDisabled>,
    /// The hop limit of metadata PUT responses (1 to 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64), extend("default" = 1))]
    pub http_put_response_hop_limit: Option<i64>,
    /// Whether session tokens (IMDSv2) are required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "required"))]
    pub http_tokens: Option<HttpTokens>,
}

/// Whether instance metadata requests need a session token.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HttpTokens {
    Required,
    Optional,
}

/// A network interface attached to the instances.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// The device index of the attachment.
    #[schemars(range(min = 0))]
    pub device_index: i32,
    /// The interface type.
    pub interface_type: InterfaceType,
    /// The network card the interface attaches to.
    #[schemars(range(min = 0))]
    pub network_card_index: i32,
}

/// The type of a network interface.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InterfaceType {
    Interface,
    EfaOnly,
}

/// The placement group to launch into.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {"message": "expected at least one, got none, ['name', 'id']", "rule": "has(self.name) || has(self.id)"},
    {"message": "'name' and 'id' are mutually exclusive", "rule": "!(has(self.name) && has(self.id))"},
]))]
pub struct PlacementGroupSelector {
    /// The placement group id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("^pg-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// The placement group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
}

/// Selection of security groups; the fields of one term are ANDed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SecurityGroupSelectorTerm {
    /// The security group id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("sg-[0-9a-z]+"))]
    pub id: Option<String>,
    /// The security group name (not the Name tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Tags that select security groups; `*` selects every value of a key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 20, "x-kubernetes-validations" = selector_tags_rules()))]
    pub tags: Option<BTreeMap<String, String>>,
}

/// Selection of subnets; the fields of one term are ANDed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SubnetSelectorTerm {
    /// The subnet id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("subnet-[0-9a-z]+"))]
    pub id: Option<String>,
    /// Tags that select subnets; `*` selects every value of a key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 20, "x-kubernetes-validations" = selector_tags_rules()))]
    pub tags: Option<BTreeMap<String, String>>,
}

/// The resolved state of an EC2NodeClass.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    /// The AMIs currently selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amis: Option<Vec<Ami>>,
    /// The capacity reservations currently selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservations: Option<Vec<CapacityReservation>>,
    /// Signals for health and readiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// The instance profile resolved for the role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// The security groups currently selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_groups: Option<Vec<SecurityGroup>>,
    /// The subnets currently selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnets: Option<Vec<Subnet>>,
}

/// A resolved AMI.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct Ami {
    /// Whether the AMI is deprecated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
    /// The AMI id.
    pub id: String,
    /// The AMI name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The instance types the AMI may run on.
    pub requirements: Vec<NodeSelectorRequirement>,
}

/// A plain node selector requirement (key, operator, values).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct NodeSelectorRequirement {
    /// The label key that the selector applies to.
    pub key: String,
    /// A key's relationship to a set of values.
    pub operator: String,
    /// The values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub values: Option<Vec<String>>,
}

/// A resolved capacity reservation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservation {
    /// The availability zone of the reservation.
    pub availability_zone: String,
    /// When the reservation expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// The reservation id.
    #[schemars(pattern("^cr-[0-9a-z]+$"))]
    pub id: String,
    /// Which launches the reservation accepts.
    pub instance_match_criteria: InstanceMatchCriteria,
    /// The instance type of the reservation.
    pub instance_type: String,
    /// Whether the reservation is interruptible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
    /// The owning account id.
    #[serde(rename = "ownerID")]
    #[schemars(pattern("^[0-9]{12}$"))]
    pub owner_id: String,
    /// The type of the reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "default"))]
    pub reservation_type: Option<ReservationType>,
    /// The state of the reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "active"))]
    pub state: Option<ReservationState>,
}

/// The type of a capacity reservation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReservationType {
    Default,
    CapacityBlock,
}

/// The state of a capacity reservation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReservationState {
    Active,
    Expiring,
}

/// A resolved security group.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct SecurityGroup {
    /// The security group id.
    pub id: String,
    /// The security group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A resolved subnet.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subnet {
    /// The subnet id.
    pub id: String,
    /// The availability zone of the subnet.
    pub zone: String,
    /// The availability zone id of the subnet.
    #[serde(rename = "zoneID", default, skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

impl MetadataOptions {
    /// The options the API server fills in when they are omitted: endpoint
    /// enabled, IPv6 disabled, hop limit 1, tokens (IMDSv2) required.
    pub fn defaulted() -> Self {
        let mut options = MetadataOptions::default();
        options.apply_defaults();
        options
    }

    fn apply_defaults(&mut self) {
        self.http_endpoint.get_or_insert(EnabledDisabled::Enabled);
        self.http_protocol_ipv6
            .get_or_insert(EnabledDisabled::Disabled);
        self.http_put_response_hop_limit.get_or_insert(1);
        self.http_tokens.get_or_insert(HttpTokens::Required);
    }
}

impl EC2NodeClass {
    /// Fills in the defaults the API server would apply, so a value that
    /// spells out a default equals one that leaves it out.
    pub fn apply_defaults(&mut self) {
        self.spec
            .metadata_options
            .get_or_insert_with(MetadataOptions::defaulted)
            .apply_defaults();
        if let Some(status) = &mut self.status {
            for reservation in status.capacity_reservations.iter_mut().flatten() {
                reservation
                    .reservation_type
                    .get_or_insert(ReservationType::Default);
                reservation.state.get_or_insert(ReservationState::Active);
            }
        }
    }

    /// The AMI family in effect: `spec.amiFamily` if set, otherwise the
    /// family of the alias term (`al2023@latest` is AL2023).
    pub fn resolved_ami_family(&self) -> Option<AmiFamily> {
        self.spec.ami_family.or_else(|| {
            self.spec
                .ami_selector_terms
                .iter()
                .find_map(|term| term.alias.as_deref())
                .and_then(AmiFamily::from_alias)
        })
    }

    /// The status condition of type `type_`, if reported.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        super::common::find_condition(self.status.as_ref()?.conditions.as_deref(), type_)
    }

    /// A minimal valid EC2NodeClass for tests and examples: the latest
    /// AL2023 AMI, subnets and security groups tagged for cluster `test`,
    /// and the role `KarpenterNodeRole-test`.
    pub fn test(name: &str) -> Self {
        let discovery = || {
            Some(BTreeMap::from([(
                "karpenter.sh/discovery".to_string(),
                "test".to_string(),
            )]))
        };
        EC2NodeClass::new(
            name,
            EC2NodeClassSpec {
                ami_family: None,
                ami_selector_terms: vec![AmiSelectorTerm {
                    alias: Some("al2023@latest".to_string()),
                    ..AmiSelectorTerm::default()
                }],
                associate_public_ip_address: None,
                block_device_mappings: None,
                capacity_reservation_selector_terms: None,
                connection_tracking: None,
                context: None,
                cpu_options: None,
                detailed_monitoring: None,
                instance_profile: None,
                instance_store_policy: None,
                ip_prefix_count: None,
                kubelet: None,
                metadata_options: None,
                network_interfaces: None,
                placement_group_selector: None,
                role: Some("KarpenterNodeRole-test".to_string()),
                security_group_selector_terms: vec![SecurityGroupSelectorTerm {
                    tags: discovery(),
                    ..SecurityGroupSelectorTerm::default()
                }],
                subnet_selector_terms: vec![SubnetSelectorTerm {
                    tags: discovery(),
                    ..SubnetSelectorTerm::default()
                }],
                tags: None,
                user_data: None,
            },
        )
    }
}
