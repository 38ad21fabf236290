//! What a NodePool or a NodeClaim asks of instance types and images, as
//! both providers read it: requirements on well-known labels constrain
//! instance types, resource requests must fit allocatable, and an image's
//! requirements pick the image a type launches with. Pure.

use std::collections::BTreeMap;

use crate::api::ec2nodeclass::{Ami, NodeSelectorRequirement};
use crate::api::{self, NodeClaim, NodePool, NodeSelectorRequirementWithMinValues};
use crate::cloud::{CloudError, OfferingKey};
use crate::model::labels::{
    ARCH, CAPACITY_TYPE, INSTANCE_TYPE, NODEPOOL, REGION, ZONE, is_well_known,
};
use crate::model::requirements::RequirementError;
use crate::model::{InstanceType, Offering, Operator, Requirement, Requirements, Resources};

/// Labels of instance-type properties. A type that does not carry one of
/// them lacks the property (no GPU, no local NVMe), so a requirement on it
/// is checked as against an absent label.
pub(crate) const INSTANCE_PROPERTY_PREFIX: &str = "karpenter.k8s.aws/instance-";

/// The launch order of a price-overlaid NodeClaim's instance types (see
/// [`api::ANNOTATION_LAUNCH_PRIORITY`]): type name → rank, lower first.
/// `None` for a NodeClaim no overlay priced, which launches by price.
pub(crate) fn launch_priority(claim: &NodeClaim) -> Option<BTreeMap<String, usize>> {
    let annotations = claim.metadata.annotations.as_ref()?;
    if annotations
        .get(api::ANNOTATION_PRICE_OVERLAY_APPLIED)
        .is_none_or(|v| v != "true")
    {
        return None;
    }
    let order = annotations.get(api::ANNOTATION_LAUNCH_PRIORITY)?;
    Some(
        order
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .enumerate()
            .map(|(i, t)| (t.to_string(), i))
            .collect(),
    )
}

/// The model's requirements of an API requirement list.
pub(crate) fn requirements_of(
    list: &[NodeSelectorRequirementWithMinValues],
) -> Result<Requirements, RequirementError> {
    let mut out = Requirements::new();
    for r in list {
        let op = match r.operator {
            api::Operator::In => Operator::In,
            api::Operator::NotIn => Operator::NotIn,
            api::Operator::Exists => Operator::Exists,
            api::Operator::DoesNotExist => Operator::DoesNotExist,
            api::Operator::Gt => Operator::Gt,
            api::Operator::Lt => Operator::Lt,
            api::Operator::Gte => Operator::Gte,
            api::Operator::Lte => Operator::Lte,
        };
        out.add(&r.key, Requirement::new(&r.key, op, r.values())?);
    }
    Ok(out)
}

/// The requirements that constrain instance types: those on well-known
/// labels. Other labels (custom ones, the NodePool name's) are put on the
/// node from the NodeClaim, whatever the instance type.
pub(crate) fn instance_constraints(requirements: &Requirements) -> Requirements {
    Requirements(
        requirements
            .0
            .iter()
            .filter(|(k, _)| is_well_known(k))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect(),
    )
}

/// The instance-type constraints of a NodePool: its requirements and its
/// template's labels.
pub(crate) fn nodepool_constraints(nodepool: &NodePool) -> Result<Requirements, CloudError> {
    let mut requirements = requirements_of(nodepool.requirements())
        .map_err(|e| CloudError::InvalidRequest(format!("spec.template.spec.requirements: {e}")))?;
    let template_labels = nodepool
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref());
    for (k, v) in template_labels.into_iter().flatten() {
        requirements.add(k, Requirement::in_values([v.clone()]));
    }
    Ok(instance_constraints(&requirements))
}

/// Does the instance type satisfy the constraints? A constraint on an
/// instance property the type lacks must allow the label to be absent;
/// other well-known labels it does not define (the NodePool's) do not
/// constrain it.
pub(crate) fn type_allowed(it: &InstanceType, constraints: &Requirements) -> bool {
    it.requirements
        .compatible(constraints, |key| {
            is_well_known(key) && !key.starts_with(INSTANCE_PROPERTY_PREFIX)
        })
        .is_ok()
}

/// Karpenter's compatibility checks of an instance type with the node class
/// it would launch from (instancetype/compatibility): connection tracking
/// timeouts need an instance built on the Nitro System.
pub(crate) fn fits_node_class(it: &InstanceType, nodeclass: &crate::api::EC2NodeClass) -> bool {
    nodeclass.spec.connection_tracking.is_none()
        || it
            .requirements
            .single_value("karpenter.k8s.aws/instance-hypervisor")
            == Some("nitro")
}

/// The NodeClaim's resource requests.
pub(crate) fn claim_requests(claim: &NodeClaim) -> Result<Resources, CloudError> {
    match claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
    {
        Some(requests) => Resources::from_k8s(requests).map_err(|(name, e)| {
            CloudError::InvalidRequest(format!("spec.resources.requests.{name}: {e}"))
        }),
        None => Ok(Resources::new()),
    }
}

pub(crate) fn offering_key(it: &InstanceType, o: &Offering) -> OfferingKey {
    OfferingKey {
        instance_type: it.name.clone(),
        zone: o.zone.clone(),
        capacity_type: o.capacity_type.clone(),
    }
}

/// The image an instance type launches with: the first of `amis` whose
/// requirements the type meets.
pub(crate) fn image_for<'a>(amis: &'a [Ami], it: &InstanceType) -> Option<&'a Ami> {
    amis.iter().find(|a| {
        a.requirements.iter().all(|r| {
            let value = it.requirements.single_value(&r.key).map(str::to_string);
            let values = r.values.clone().unwrap_or_default();
            let positive = value
                .as_deref()
                .and_then(|v| v.parse::<i64>().ok())
                .is_none_or(|n| n > 0);
            match r.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(&v)),
                "NotIn" => value.is_none_or(|v| !values.contains(&v)),
                "Exists" => value.is_some() && positive,
                "DoesNotExist" => value.is_none() || !positive,
                _ => false,
            }
        })
    })
}

/// The labels of an instance's node: its type's labels, then the zone,
/// region, capacity type and instance type of the offering it runs on, and
/// its NodePool (if it has one).
pub(crate) fn instance_labels(
    mut type_labels: BTreeMap<String, String>,
    offering: &OfferingKey,
    region: &str,
    nodepool: &str,
) -> BTreeMap<String, String> {
    type_labels.insert(ZONE.to_string(), offering.zone.clone());
    type_labels.insert(REGION.to_string(), region.to_string());
    type_labels.insert(CAPACITY_TYPE.to_string(), offering.capacity_type.clone());
    type_labels.insert(INSTANCE_TYPE.to_string(), offering.instance_type.clone());
    if !nodepool.is_empty() {
        type_labels.insert(NODEPOOL.to_string(), nodepool.to_string());
    }
    type_labels
}

/// The requirements the reference gives an image of a variant: the
/// architecture, and which accelerators the instance type has (`nvidia`:
/// GPUs, `neuron`: Neuron devices; standard images for types with neither).
pub(crate) fn variant_requirements(arch: &str, variant: &str) -> Vec<NodeSelectorRequirement> {
    const GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
    const ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
    let req = |key: &str, operator: &str, values: Option<Vec<String>>| NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values,
    };
    let mut out = vec![req(ARCH, "In", Some(vec![arch.to_string()]))];
    match variant {
        "nvidia" => out.push(req(GPU_COUNT, "Exists", None)),
        "neuron" => out.push(req(ACCELERATOR_COUNT, "Exists", None)),
        _ => {
            out.push(req(GPU_COUNT, "DoesNotExist", None));
            out.push(req(ACCELERATOR_COUNT, "DoesNotExist", None));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// compatibility.go, connectionTrackingCheck: a node class with
    /// connection tracking launches only types built on the Nitro System
    /// (not Xen, nor bare metal, whose hypervisor label is empty).
    #[test]
    fn connection_tracking_needs_nitro() {
        let catalog = crate::cloud::sim::SimEc2::builtin_catalog().expect("catalog");
        let with_hypervisor = |h: &str| {
            let mut it = catalog[0].clone();
            it.requirements =
                crate::model::Requirements::from_labels(&std::collections::BTreeMap::from([(
                    "karpenter.k8s.aws/instance-hypervisor".to_string(),
                    h.to_string(),
                )]));
            it
        };
        let (nitro, xen, metal) = (
            with_hypervisor("nitro"),
            with_hypervisor("xen"),
            with_hypervisor(""),
        );
        let mut class = crate::api::EC2NodeClass::test("d");
        assert!(
            [&nitro, &xen, &metal]
                .iter()
                .all(|it| fits_node_class(it, &class))
        );
        class.spec.connection_tracking = Some(crate::api::ec2nodeclass::ConnectionTracking {
            tcp_established_timeout: Some(3600),
            ..Default::default()
        });
        assert!(fits_node_class(&nitro, &class));
        assert!(!fits_node_class(&xen, &class));
        assert!(!fits_node_class(&metal, &class));
        // The built-in catalog's types are all Nitro.
        assert!(catalog.iter().all(|it| fits_node_class(it, &class)));
    }
}
