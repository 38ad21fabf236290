//! The Karpenter v1 API types (NodePool, NodeClaim, EC2NodeClass), Karpenter
//! v1.14's NodeOverlay (`karpenter.sh/v1alpha1`) and the SIG Autoscaling
//! CapacityBuffer (`autoscaling.x-k8s.io/v1beta1`), their defaults, and the
//! CustomResourceDefinitions and JSON Schemas generated from them.
//!
//! The types follow the Karpenter v1.14.1 CRDs field for field: the same
//! names, types, enums, patterns, bounds, defaults and CEL rules. Durations
//! and quantities stay strings; the schema checks their syntax.
//!
//! Generated artefacts, checked in and compared against the generator by
//! unit tests:
//! - `crds/<group>_<plural>.yaml`, as controller-gen names them
//!   (`crds/karpenter.sh_nodepools.yaml`, `crds/karpenter.sh_nodeclaims.yaml`,
//!   `crds/karpenter.k8s.aws_ec2nodeclasses.yaml`), see [`crd`];
//! - `schemas/<kind>.schema.json` (`schemas/nodepool.schema.json`, ...), the
//!   JSON Schemas `dovetail validate` checks files against, see [`schema`].
//!
//! Regenerate both with `dovetail crds --out-dir crds` (CRDs only) or
//! `DOVETAIL_BLESS=1 cargo test --lib api::` (both).
//!
//! CapacityBuffer is the one namespaced `ApiKind`: sync and `diff` name it
//! `namespace/name`. Label and annotation keys are constants (`api::labels`);
//! `api::pod::SlimPod` is the Pod as dovetail reads it; `api::node` and
//! `api::pod` hold the predicates every loop shares (Ready, finished,
//! owned by a DaemonSet); `api::names` Kubernetes' name syntax, which
//! validation and label selectors share.

pub mod capacitybuffer;
pub mod common;
pub mod crd;
pub mod ec2nodeclass;
pub mod labels;
pub mod names;
pub mod node;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod pod;
pub mod schema;
pub mod shared;
pub mod structural;

#[cfg(test)]
mod behaviour;
#[cfg(test)]
mod conformance;

pub use capacitybuffer::CapacityBuffer;
pub use common::{
    Condition, ConditionStatus, NodeClassReference, NodeSelectorRequirementWithMinValues, Operator,
    Taint, TaintEffect,
};
pub use crd::{crd_files, crds, crds_yaml, openapi_schema, write_crds};
pub use ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus};
pub use labels::*;
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use nodeoverlay::NodeOverlay;
pub use nodepool::{NodePool, NodePoolSpec, NodePoolStatus};
pub use pod::{SlimContainer, SlimPod, SlimPodSpec, SlimPodStatus, SlimResources, SlimVolume};
pub use schema::{schema_files, validation_schema, write_schemas};

/// The API group of NodePool and NodeClaim.
pub const GROUP_KARPENTER: &str = "karpenter.sh";
/// The API group of EC2NodeClass.
pub const GROUP_KARPENTER_AWS: &str = "karpenter.k8s.aws";
/// The API version of all three kinds.
pub const VERSION_V1: &str = "v1";
/// The default `expireAfter` of NodePool templates and NodeClaims.
pub const DEFAULT_EXPIRE_AFTER: &str = "720h";

/// The kinds of the Karpenter API that dovetail reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApiKind {
    NodePool,
    NodeClaim,
    EC2NodeClass,
    /// `karpenter.sh/v1alpha1` NodeOverlay (feature gate `NodeOverlay`).
    NodeOverlay,
    /// `autoscaling.x-k8s.io/v1beta1` CapacityBuffer, the SIG Autoscaling
    /// API as Karpenter v1.14.1 serves it (feature gate `CapacityBuffer`).
    CapacityBuffer,
}

/// The API group of CapacityBuffer.
pub const GROUP_AUTOSCALING: &str = "autoscaling.x-k8s.io";

impl ApiKind {
    /// Every kind, in the order of [`crds`].
    pub const ALL: [ApiKind; 5] = [
        ApiKind::NodePool,
        ApiKind::NodeClaim,
        ApiKind::EC2NodeClass,
        ApiKind::NodeOverlay,
        ApiKind::CapacityBuffer,
    ];

    /// The kinds a configuration repository holds and sync applies, in
    /// the order sync applies them (a NodePool names its EC2NodeClass).
    pub const SYNCED: [ApiKind; 4] = [
        ApiKind::EC2NodeClass,
        ApiKind::NodePool,
        ApiKind::NodeOverlay,
        ApiKind::CapacityBuffer,
    ];

    /// The API group (`karpenter.sh`, `karpenter.k8s.aws`,
    /// `autoscaling.x-k8s.io`).
    pub fn group(self) -> &'static str {
        match self {
            ApiKind::NodePool | ApiKind::NodeClaim | ApiKind::NodeOverlay => GROUP_KARPENTER,
            ApiKind::EC2NodeClass => GROUP_KARPENTER_AWS,
            ApiKind::CapacityBuffer => GROUP_AUTOSCALING,
        }
    }

    /// The API version (`v1`, `v1alpha1`, `v1beta1`).
    pub fn version(self) -> &'static str {
        match self {
            ApiKind::NodeOverlay => "v1alpha1",
            ApiKind::CapacityBuffer => "v1beta1",
            _ => VERSION_V1,
        }
    }

    /// The `apiVersion` of objects of this kind (`karpenter.sh/v1`).
    pub fn api_version(self) -> &'static str {
        match self {
            ApiKind::NodePool | ApiKind::NodeClaim => "karpenter.sh/v1",
            ApiKind::EC2NodeClass => "karpenter.k8s.aws/v1",
            ApiKind::NodeOverlay => "karpenter.sh/v1alpha1",
            ApiKind::CapacityBuffer => "autoscaling.x-k8s.io/v1beta1",
        }
    }

    /// An earlier `apiVersion` with the same schema that the v1.14.1 CRD no
    /// longer serves (v1.14 graduated CapacityBuffer to v1beta1, while its
    /// concept page still shows v1alpha1): `validate` warns about it, sync
    /// and diff read such a document as the served version.
    pub fn previous_api_version(self) -> Option<&'static str> {
        match self {
            ApiKind::CapacityBuffer => Some("autoscaling.x-k8s.io/v1alpha1"),
            _ => None,
        }
    }

    /// The `kind` of objects of this kind (`NodePool`).
    pub fn kind(self) -> &'static str {
        match self {
            ApiKind::NodePool => "NodePool",
            ApiKind::NodeClaim => "NodeClaim",
            ApiKind::EC2NodeClass => "EC2NodeClass",
            ApiKind::NodeOverlay => "NodeOverlay",
            ApiKind::CapacityBuffer => "CapacityBuffer",
        }
    }

    /// The plural resource name (`nodepools`).
    pub fn plural(self) -> &'static str {
        match self {
            ApiKind::NodePool => "nodepools",
            ApiKind::NodeClaim => "nodeclaims",
            ApiKind::EC2NodeClass => "ec2nodeclasses",
            ApiKind::NodeOverlay => "nodeoverlays",
            ApiKind::CapacityBuffer => "capacitybuffers",
        }
    }

    /// The singular resource name (`nodepool`), also the stem of the JSON
    /// Schema file name.
    pub fn singular(self) -> &'static str {
        match self {
            ApiKind::NodePool => "nodepool",
            ApiKind::NodeClaim => "nodeclaim",
            ApiKind::EC2NodeClass => "ec2nodeclass",
            ApiKind::NodeOverlay => "nodeoverlay",
            ApiKind::CapacityBuffer => "capacitybuffer",
        }
    }

    /// Whether objects of this kind live in a namespace (only
    /// CapacityBuffer does).
    pub fn namespaced(self) -> bool {
        self == ApiKind::CapacityBuffer
    }

    /// The kind of an object with this `apiVersion` and `kind`, if it is one
    /// of dovetail's kinds in the version the v1.14.1 CRDs serve.
    pub fn from_type_meta(api_version: &str, kind: &str) -> Option<ApiKind> {
        ApiKind::ALL
            .into_iter()
            .find(|k| k.api_version() == api_version && k.kind() == kind)
    }

    /// The name objects of this kind are known by in sync and diff:
    /// `namespace/name` for a namespaced kind (the namespace `default` when
    /// the document sets none, as for `kubectl apply` in that namespace),
    /// the name otherwise.
    pub fn object_name(self, doc: &serde_json::Value) -> String {
        let name = doc
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        if self.namespaced() {
            let ns = doc
                .pointer("/metadata/namespace")
                .and_then(serde_json::Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or("default");
            format!("{ns}/{name}")
        } else {
            name.to_string()
        }
    }
}

impl std::fmt::Display for ApiKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn api_kind_agrees_with_the_derived_resources() {
        fn check<K: Resource<DynamicType = ()>>(kind: ApiKind) {
            assert_eq!(K::group(&()), kind.group());
            assert_eq!(K::version(&()), kind.version());
            assert_eq!(K::api_version(&()), kind.api_version());
            assert_eq!(K::kind(&()), kind.kind());
            assert_eq!(K::plural(&()), kind.plural());
        }
        check::<NodePool>(ApiKind::NodePool);
        check::<NodeClaim>(ApiKind::NodeClaim);
        check::<EC2NodeClass>(ApiKind::EC2NodeClass);
        check::<nodeoverlay::NodeOverlay>(ApiKind::NodeOverlay);
        check::<capacitybuffer::CapacityBuffer>(ApiKind::CapacityBuffer);
        assert!(ApiKind::CapacityBuffer.namespaced());
        assert!(!ApiKind::NodeOverlay.namespaced());
    }

    #[test]
    fn api_kind_from_type_meta() {
        for kind in ApiKind::ALL {
            assert_eq!(
                ApiKind::from_type_meta(kind.api_version(), kind.kind()),
                Some(kind)
            );
        }
        assert_eq!(
            ApiKind::from_type_meta("karpenter.sh/v1beta1", "NodePool"),
            None
        );
        assert_eq!(
            ApiKind::from_type_meta("karpenter.sh/v1", "EC2NodeClass"),
            None
        );
    }
}
