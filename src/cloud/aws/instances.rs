//! EC2 instances as the controller sees them ([`Instance`]).

use std::collections::BTreeMap;

use crate::clock::Timestamp;
use crate::cloud::select::instance_labels;
use crate::cloud::{Instance, InstanceState, OfferingKey};

use super::instance_types::{LABEL_TENANCY, LABEL_ZONE_ID, TENANCY_DEFAULT};
use super::launch::{TAG_LAUNCH_BATCH, TAG_NODECLAIM, TAG_NODEPOOL};
use super::reservations;

/// `aws:///<zone>/<id>`, as the kubelet sets `spec.providerID`.
pub fn provider_id(zone: &str, id: &str) -> String {
    format!("aws:///{zone}/{id}")
}

/// The instance id of a provider id (`aws:///us-east-1a/i-0abc` ->
/// `i-0abc`), or `None` if it is not one.
pub fn instance_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws:///")?;
    let id = rest.rsplit('/').next()?;
    (id.starts_with("i-") && id.len() > 2).then_some(id)
}

/// The capacity type of an instance: `spot` for spot instances,
/// `reserved` for one launched into a capacity reservation it targets
/// alone (`capacity-reservations-only`, as reserved launches are; one that
/// fell into an open reservation by itself stays `on-demand`, as in
/// Karpenter), else `on-demand`.
pub fn capacity_type(i: &aws_sdk_ec2::types::Instance) -> &'static str {
    if i.instance_lifecycle().map(|l| l.as_str()) == Some("spot") {
        return crate::api::CAPACITY_TYPE_SPOT;
    }
    if reservation(i).is_some() {
        return crate::api::CAPACITY_TYPE_RESERVED;
    }
    crate::api::CAPACITY_TYPE_ON_DEMAND
}

/// The reservation a reserved instance runs in, with its labels
/// (id, type, interruptible).
pub fn reservation(i: &aws_sdk_ec2::types::Instance) -> Option<[(&'static str, String); 3]> {
    use aws_sdk_ec2::types::CapacityReservationPreference;
    let id = i.capacity_reservation_id()?;
    let only = i
        .capacity_reservation_specification()
        .and_then(|s| s.capacity_reservation_preference())
        == Some(&CapacityReservationPreference::CapacityReservationsOnly);
    if !only {
        return None;
    }
    let lifecycle = i.instance_lifecycle().map(|l| l.as_str());
    Some([
        (reservations::LABEL_RESERVATION_ID, id.to_string()),
        (
            reservations::LABEL_RESERVATION_TYPE,
            if lifecycle == Some("capacity-block") {
                "capacity-block"
            } else {
                "default"
            }
            .to_string(),
        ),
        (
            reservations::LABEL_RESERVATION_INTERRUPTIBLE,
            (lifecycle == Some("interruptible-capacity-reservation")).to_string(),
        ),
    ])
}

/// The lifecycle state of an instance (stopping and stopped count as
/// shutting down: such an instance runs no node).
pub fn state(i: &aws_sdk_ec2::types::Instance) -> InstanceState {
    match i.state().and_then(|s| s.name()).map(|n| n.as_str()) {
        Some("running") => InstanceState::Running,
        Some("terminated") => InstanceState::Terminated,
        Some("shutting-down" | "stopping" | "stopped") => InstanceState::ShuttingDown,
        _ => InstanceState::Pending,
    }
}

fn timestamp(t: &aws_sdk_ec2::primitives::DateTime) -> Option<Timestamp> {
    Timestamp::new(t.secs(), i32::try_from(t.subsec_nanos()).ok()?).ok()
}

/// An EC2 instance as an [`Instance`]. `type_labels` gives the well-known
/// labels of its instance type, `price` the hourly price of its offering
/// (type, zone, capacity type). `None` when EC2 left out its id, type or
/// zone.
pub fn convert(
    i: &aws_sdk_ec2::types::Instance,
    region: &str,
    type_labels: impl Fn(&str) -> BTreeMap<String, String>,
    price: impl Fn(&str, &str, &str) -> Option<f64>,
) -> Option<Instance> {
    convert_with_zone_ids(i, region, type_labels, price, |_| None)
}

/// [`convert`], with `zone_id` naming a zone's id where EC2 does not
/// (the `topology.k8s.aws/zone-id` label).
pub fn convert_with_zone_ids(
    i: &aws_sdk_ec2::types::Instance,
    region: &str,
    type_labels: impl Fn(&str) -> BTreeMap<String, String>,
    price: impl Fn(&str, &str, &str) -> Option<f64>,
    zone_id: impl Fn(&str) -> Option<String>,
) -> Option<Instance> {
    let id = i.instance_id()?.to_string();
    let instance_type = i.instance_type()?.as_str().to_string();
    let zone = i.placement()?.availability_zone()?.to_string();
    let capacity_type = capacity_type(i).to_string();
    let tags: BTreeMap<&str, &str> = i
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?, t.value().unwrap_or_default())))
        .collect();
    let nodepool = tags
        .get(TAG_NODEPOOL)
        .copied()
        .unwrap_or_default()
        .to_string();
    let offering = OfferingKey {
        instance_type: instance_type.clone(),
        zone: zone.clone(),
        capacity_type: capacity_type.clone(),
    };
    let mut labels = instance_labels(type_labels(&instance_type), &offering, region, &nodepool);
    for (k, v) in reservation(i).into_iter().flatten() {
        labels.insert(k.to_string(), v);
    }
    let placement = i.placement();
    labels.insert(
        LABEL_TENANCY.to_string(),
        placement
            .and_then(|p| p.tenancy())
            .map_or(TENANCY_DEFAULT, |t| t.as_str())
            .to_string(),
    );
    if let Some(id) = placement
        .and_then(|p| p.availability_zone_id().map(str::to_string))
        .or_else(|| zone_id(&zone))
    {
        labels.insert(LABEL_ZONE_ID.to_string(), id);
    }
    // The placement group and partition the instance was placed in, as
    // Karpenter's registration hook reads them.
    if let Some(group) = placement.and_then(|p| p.group_id()) {
        labels.insert(
            super::placement::LABEL_PLACEMENT_GROUP_ID.to_string(),
            group.to_string(),
        );
        if let Some(n) = placement.and_then(|p| p.partition_number()) {
            labels.insert(
                super::placement::LABEL_PLACEMENT_GROUP_PARTITION.to_string(),
                n.to_string(),
            );
        }
    }
    let mut security_group_ids: Vec<String> = i
        .security_groups()
        .iter()
        .filter_map(|g| g.group_id().map(str::to_string))
        .collect();
    security_group_ids.sort();
    Some(Instance {
        provider_id: provider_id(&zone, &id),
        price: price(&instance_type, &zone, &capacity_type).unwrap_or(0.0),
        launched_at: i
            .launch_time()
            .and_then(timestamp)
            .unwrap_or(Timestamp::UNIX_EPOCH),
        state: state(i),
        nodeclaim: tags
            .get(TAG_NODECLAIM)
            .copied()
            .unwrap_or_default()
            .to_string(),
        launch_batch: match tags.get(TAG_NODECLAIM) {
            Some(_) => Vec::new(),
            None => tags
                .get(TAG_LAUNCH_BATCH)
                .map(|b| {
                    b.split(',')
                        .filter(|c| !c.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        },
        nodepool,
        labels: labels.into(),
        image_id: i.image_id().map(str::to_string),
        subnet_id: i.subnet_id().map(str::to_string),
        security_group_ids,
        // Karpenter counts the EFA (and EFA-only) interfaces.
        efa_attached: i.network_interfaces().iter().any(|n| {
            n.interface_type()
                .is_some_and(|t| t == "efa" || t == "efa-only")
        }),
        id,
        instance_type,
        zone,
        capacity_type,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::primitives::DateTime;
    use aws_sdk_ec2::types::{
        GroupIdentifier, InstanceLifecycleType, InstanceState as Ec2State, InstanceStateName,
        InstanceType, Placement, Tag,
    };

    #[test]
    fn provider_ids_round_trip() {
        let pid = provider_id("us-east-1a", "i-0123456789abcdef0");
        assert_eq!(pid, "aws:///us-east-1a/i-0123456789abcdef0");
        assert_eq!(instance_id(&pid), Some("i-0123456789abcdef0"));
        assert_eq!(instance_id("kind://x/y"), None);
        assert_eq!(instance_id("aws:///us-east-1a/"), None);
    }

    #[test]
    fn instances_convert_with_tags_state_and_price() {
        let i = aws_sdk_ec2::types::Instance::builder()
            .instance_id("i-1")
            .instance_type(InstanceType::M5Large)
            .placement(Placement::builder().availability_zone("us-east-1b").build())
            .instance_lifecycle(InstanceLifecycleType::Spot)
            .state(Ec2State::builder().name(InstanceStateName::Running).build())
            .image_id("ami-1")
            .subnet_id("subnet-1")
            .security_groups(GroupIdentifier::builder().group_id("sg-2").build())
            .security_groups(GroupIdentifier::builder().group_id("sg-1").build())
            .tags(Tag::builder().key(TAG_NODEPOOL).value("default").build())
            .tags(
                Tag::builder()
                    .key(TAG_NODECLAIM)
                    .value("default-abc")
                    .build(),
            )
            .launch_time(DateTime::from_secs(1_767_225_600))
            .build();
        let got = convert_with_zone_ids(
            &i,
            "us-east-1",
            |_| BTreeMap::from([("kubernetes.io/arch".to_string(), "amd64".to_string())]),
            |t, z, c| (t == "m5.large" && z == "us-east-1b" && c == "spot").then_some(0.035),
            |z| (z == "us-east-1b").then(|| "use1-az2".to_string()),
        )
        .expect("converts");
        assert_eq!(got.labels["topology.k8s.aws/zone-id"], "use1-az2");
        assert_eq!(got.labels["karpenter.k8s.aws/instance-tenancy"], "default");
        assert_eq!(got.provider_id, "aws:///us-east-1b/i-1");
        assert_eq!(got.capacity_type, "spot");
        assert_eq!(got.state, InstanceState::Running);
        assert_eq!(got.price, 0.035);
        assert_eq!(got.nodeclaim, "default-abc");
        assert_eq!(got.security_group_ids, ["sg-1", "sg-2"]);
        assert_eq!(got.labels["karpenter.sh/nodepool"], "default");
        assert_eq!(got.labels["topology.kubernetes.io/zone"], "us-east-1b");
        assert_eq!(
            crate::clock::format_rfc3339(got.launched_at),
            "2026-01-01T00:00:00Z"
        );
    }
}
