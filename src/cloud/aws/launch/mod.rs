//! What a launch sends to EC2, as pure values: the user data per AMI
//! family, the launch templates, the CreateFleet overrides, and how
//! CreateFleet's answer maps back to instances and refused offerings.
//!
//! # User data
//! - AL2023: a MIME multi-part document for nodeadm: the user's parts
//!   first (a `NodeConfig` or a shell script, or their own MIME parts),
//!   then dovetail's `NodeConfig` (cluster name, endpoint, certificate
//!   authority, service CIDR; the kubelet settings the node class sets;
//!   node labels and the registration taints). nodeadm merges them.
//! - Bottlerocket: the user's TOML with dovetail's `settings.kubernetes`
//!   keys set over it (cluster, labels and taints merged).
//! - AL2: the user's parts, then a script calling `/etc/eks/bootstrap.sh`.
//! - Windows: the user's script, then `Start-EKSBootstrap.ps1`.
//! - Custom: the user's user data unchanged.
//!
//! The kubelet settings go into user data only when the node class sets
//! them; otherwise the node's bootstrap computes the same defaults the
//! scheduler assumes (see [`super::instance_types`]). Every node registers
//! with the `karpenter.sh/unregistered:NoExecute` taint, which the
//! controller removes when it adopts the node.
//!
//! # Launch templates
//! One per distinct (image, user data, block devices, metadata options,
//! security groups, instance profile, monitoring, public IP), named
//! `dovetail/<cluster>/<16 hex digits of an FNV-1a hash of those>`, so
//! identical launches share one and a change makes a new one. Defaults:
//! IMDSv2 required with hop limit 1 (the node class's `metadataOptions`),
//! an encrypted 20Gi gp3 root volume (Bottlerocket: 4Gi root and a 20Gi
//! data volume; Windows: 50Gi).
//!
//! # CreateFleet
//! `Type=instant`, one launch template config per image, with an override
//! for every (instance type, zone) the NodeClaim allows whose type fits its
//! requests and has an image, through the first subnet of the zone (the
//! one with the most free addresses), cheapest first, at most
//! [`MAX_INSTANCE_TYPES`] types. Spot when the NodeClaim allows it and a
//! spot offering is left, with `price-capacity-optimized`; otherwise
//! on-demand with `lowest-price`. A NodeClaim a NodeOverlay priced
//! (`karpenter.sh/price-overlay-applied`) launches in its overlaid order
//! (`dovetail.dev/launch-priority`) with `capacity-optimized-prioritized`
//! and `prioritized`, as the reference does.
//!
//! # Capacity reservations
//! A NodeClaim that allows `reserved` and has a reserved offering left
//! launches reserved, before spot and on-demand (Karpenter's order): only
//! its reserved offerings are kept, of one kind (the cheapest's: ordinary
//! reservations before capacity blocks before interruptible ones; a
//! capacity block alone, as CreateFleet takes one), each through a launch
//! template targeting its reservation ([`super::reservations`]).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hasher;

use base64::Engine;
use serde_json::{Value, json};

use super::config::ClusterAccess;
use super::instance_types::{
    Family, LABEL_TENANCY, LABEL_ZONE_ID, TENANCY_DEDICATED, TENANCY_DEFAULT,
};
use super::placement::{LABEL_PLACEMENT_GROUP_PARTITION, PlacementGroup};
use super::reservations::{
    self, Availability, LABEL_RESERVATION_ID, LABEL_RESERVATION_INTERRUPTIBLE,
    LABEL_RESERVATION_TYPE,
};
use crate::api::ec2nodeclass::{
    Ami, BlockDevice, BlockDeviceMapping, CapacityReservation, ConnectionTracking, EnabledDisabled,
    HttpTokens, InstanceStorePolicy, InterfaceType, KubeletConfiguration, MetadataOptions,
    NetworkInterface, ReservationType, VolumeType,
};
use crate::api::{EC2NodeClass, NodeClaim, TAINT_UNREGISTERED};
use crate::cloud::select::{
    claim_requests, image_for, instance_constraints, launch_priority, offering_key,
    requirements_of, type_allowed,
};
use crate::cloud::{CloudError, NodeClassResolution, OfferingKey};
use crate::model::InstanceType;
use crate::model::labels::{CAPACITY_TYPE, NODEPOOL, ZONE, is_well_known};
use crate::model::quantity::PODS;

mod fleet;
mod template;
#[cfg(test)]
mod tests;
mod user_data;

pub use fleet::*;
pub use template::*;
pub use user_data::*;

/// Elastic Fabric Adapter interfaces, as instance types advertise them.
pub const EFA: &str = "vpc.amazonaws.com/efa";

/// The reference's cap on instance types per CreateFleet call.
pub const MAX_INSTANCE_TYPES: usize = 60;
/// CreateFleet errors that mean an offering cannot be launched now
/// (Karpenter's unfulfillable-capacity codes but reserved capacity's).
pub const CAPACITY_ERRORS: [&str; 8] = [
    "InsufficientInstanceCapacity",
    super::reservations::RESERVATION_CAPACITY_EXCEEDED,
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "MaxFleetCountExceeded",
];
/// A subnet has no free address: it is skipped for a while, and a zone
/// whose subnets all are is skipped.
pub const SUBNET_FULL: &str = "InsufficientFreeAddressesInSubnet";
/// The account has no Spot service-linked role and the controller may not
/// create it: spot cannot launch until someone creates the role.
pub const SPOT_ROLE_MISSING: &str = "AuthFailure.ServiceLinkedRoleCreationNotPermitted";
/// Tags dovetail puts on what it creates.
pub const TAG_NODEPOOL: &str = "karpenter.sh/nodepool";
pub const TAG_NODECLAIM: &str = "karpenter.sh/nodeclaim";
pub const TAG_NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const TAG_EKS_CLUSTER: &str = "eks:eks-cluster-name";
/// On the instances of a CreateFleet for several NodeClaims, until each is
/// tagged with its own: the claims' names, comma-separated. A replica that
/// takes over after the launching one died between the fleet and the
/// tagging finds each claim's instance among them instead of launching
/// again.
pub const TAG_LAUNCH_BATCH: &str = "dovetail.dev/launch-batch";
/// The longest value EC2 takes for a tag, and so for a batch's names.
pub const TAG_VALUE_MAX: usize = 256;
/// On launch templates: the image they launch (for clean-up).
pub const TAG_IMAGE: &str = "dovetail.dev/image-id";
pub(super) const MIME_BOUNDARY: &str = "//";

/// `kubernetes.io/cluster/<name>`, valued `owned`.
pub fn cluster_tag(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}
