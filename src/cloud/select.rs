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

/// What Karpenter's compatibility checks read of an instance type from
/// DescribeInstanceTypes, beyond its labels. A provider that does not know
/// them (a catalog without them) has none, and a node class that needs
/// them launches no type: Karpenter too refuses a type whose facts are
/// missing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hardware {
    /// The most network interfaces of each network card, by card index.
    pub network_cards: Vec<i64>,
    /// ENA is supported (or required).
    pub ena: bool,
    /// The most EFA interfaces.
    pub max_efa_interfaces: i64,
    /// Nested virtualization is among the processor's features.
    pub nested_virtualization: bool,
    /// The placement group strategies it supports.
    pub placement_strategies: Vec<String>,
}

/// What a node class asks of the instance types it launches, as
/// Karpenter's compatibility checks read it (instancetype/compatibility):
/// its network interfaces, nested virtualization, connection tracking and
/// the strategy of its placement group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct NodeClassNeeds {
    /// (network card, device index, EFA only) of each configured interface.
    interfaces: Vec<(i32, i32, bool)>,
    nested_virtualization: bool,
    connection_tracking: bool,
    placement_strategy: Option<String>,
}

impl NodeClassNeeds {
    /// The needs of `nodeclass`, whose placement group (if it selects one)
    /// resolved to `placement_strategy`.
    pub(crate) fn of(
        nodeclass: &crate::api::EC2NodeClass,
        placement_strategy: Option<&str>,
    ) -> NodeClassNeeds {
        let spec = &nodeclass.spec;
        NodeClassNeeds {
            interfaces: spec
                .network_interfaces
                .iter()
                .flatten()
                .map(|n| {
                    (
                        n.network_card_index,
                        n.device_index,
                        n.interface_type == crate::api::ec2nodeclass::InterfaceType::EfaOnly,
                    )
                })
                .collect(),
            nested_virtualization: spec
                .cpu_options
                .as_ref()
                .and_then(|c| c.nested_virtualization)
                == Some(crate::api::ec2nodeclass::EnabledDisabled::Enabled),
            connection_tracking: spec.connection_tracking.is_some(),
            placement_strategy: placement_strategy.map(str::to_string),
        }
    }

    /// Whether nothing is asked: every type fits.
    pub(crate) fn is_empty(&self) -> bool {
        *self == NodeClassNeeds::default()
    }

    /// Whether `it`, with `hardware` where known, can launch from the node
    /// class: Karpenter's checks, in its order.
    pub(crate) fn admit(&self, it: &InstanceType, hardware: Option<&Hardware>) -> bool {
        if self.is_empty() {
            return true;
        }
        // Connection tracking timeouts need the Nitro System.
        if self.connection_tracking
            && it
                .requirements
                .single_value("karpenter.k8s.aws/instance-hypervisor")
                != Some("nitro")
        {
            return false;
        }
        let needs_hardware = !self.interfaces.is_empty()
            || self.nested_virtualization
            || self.placement_strategy.is_some();
        if !needs_hardware {
            return true;
        }
        let Some(hw) = hardware else {
            return false;
        };
        if !self.interfaces.is_empty() {
            if hw.network_cards.is_empty() || !hw.ena {
                return false;
            }
            // Each interface's card exists and has room for its device
            // index.
            let fits = self.interfaces.iter().all(|&(card, device, _)| {
                usize::try_from(card)
                    .ok()
                    .and_then(|c| hw.network_cards.get(c))
                    .is_some_and(|&max| i64::from(device) < max)
            });
            let efa_only = self.interfaces.iter().filter(|i| i.2).count() as i64;
            if !fits || efa_only > hw.max_efa_interfaces {
                return false;
            }
        }
        if self.nested_virtualization && !hw.nested_virtualization {
            return false;
        }
        self.placement_strategy
            .as_ref()
            .is_none_or(|s| hw.placement_strategies.contains(s))
    }
}

/// Karpenter's compatibility checks of an instance type with the node class
/// it would launch from, for a provider that knows no more of its types than
/// their labels (see [`NodeClassNeeds::admit`]).
pub(crate) fn fits_node_class(it: &InstanceType, nodeclass: &crate::api::EC2NodeClass) -> bool {
    NodeClassNeeds::of(nodeclass, None).admit(it, None)
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
    // A type's reservation requirements list the reservations it has; a
    // node carries their labels only when launched into one (the launch
    // adds them).
    for key in crate::model::labels::RESERVATION_KEYS {
        type_labels.remove(key);
    }
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
        let catalog = crate::world::ec2::SimEc2::builtin_catalog().expect("catalog");
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

    /// compatibility.go's network interface, nested virtualization and
    /// placement group checks, against DescribeInstanceTypes facts; a type
    /// whose facts are unknown fits only a node class that needs none.
    #[test]
    fn interfaces_nested_virtualization_and_placement_strategy_need_the_hardware() {
        let it = crate::world::ec2::SimEc2::builtin_catalog().expect("catalog")[0].clone();
        let hw = Hardware {
            network_cards: vec![4, 2],
            ena: true,
            max_efa_interfaces: 1,
            nested_virtualization: false,
            placement_strategies: vec!["cluster".into(), "spread".into()],
        };
        let class = |yaml: &str| {
            let mut c = crate::api::EC2NodeClass::test("d");
            let extra: crate::api::ec2nodeclass::EC2NodeClassSpec = serde_json::from_value({
                let mut base = serde_json::to_value(&c.spec).expect("spec");
                let add: serde_json::Value = serde_saphyr::from_str(yaml).expect("yaml");
                for (k, v) in add.as_object().expect("a map") {
                    base[k] = v.clone();
                }
                base
            })
            .expect("a spec");
            c.spec = extra;
            c
        };
        let admits = |yaml: &str, strategy: Option<&str>, hw: Option<&Hardware>| {
            NodeClassNeeds::of(&class(yaml), strategy).admit(&it, hw)
        };
        let nic = |card: i32, device: i32, kind: &str| {
            format!("{{networkCardIndex: {card}, deviceIndex: {device}, interfaceType: {kind}}}")
        };
        let interfaces = |list: &[String]| format!("networkInterfaces: [{}]", list.join(", "));
        // Nothing asked: every type, facts or not.
        assert!(admits("{}", None, None));
        let ok = interfaces(&[nic(0, 0, "interface"), nic(1, 1, "efa-only")]);
        assert!(admits(&ok, None, Some(&hw)));
        assert!(!admits(&ok, None, None), "unknown facts");
        // A card the type lacks, a device index past the card's interfaces,
        // more EFA-only interfaces than it has EFA.
        for bad in [
            interfaces(&[nic(0, 0, "interface"), nic(2, 0, "interface")]),
            interfaces(&[nic(0, 0, "interface"), nic(1, 2, "interface")]),
            interfaces(&[
                nic(0, 0, "interface"),
                nic(0, 1, "efa-only"),
                nic(1, 0, "efa-only"),
            ]),
        ] {
            assert!(!admits(&bad, None, Some(&hw)), "{bad}");
        }
        let no_ena = Hardware {
            ena: false,
            ..hw.clone()
        };
        assert!(!admits(&ok, None, Some(&no_ena)));
        let nested = "cpuOptions: {nestedVirtualization: enabled}";
        assert!(!admits(nested, None, Some(&hw)));
        let with_nested = Hardware {
            nested_virtualization: true,
            ..hw.clone()
        };
        assert!(admits(nested, None, Some(&with_nested)));
        // Disabled asks nothing of the type.
        assert!(admits(
            "cpuOptions: {nestedVirtualization: disabled}",
            None,
            None
        ));
        assert!(admits("{}", Some("cluster"), Some(&hw)));
        assert!(!admits("{}", Some("partition"), Some(&hw)));
        assert!(!admits("{}", Some("cluster"), None));
    }
}
