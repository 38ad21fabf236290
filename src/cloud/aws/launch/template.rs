//! Launch templates: block devices, `TemplateSpec` (what a template
//! holds, named by its hash) and the `RequestLaunchTemplateData` it
//! becomes.

use super::*;

/// The block device mappings of a launch: the node class's, or the
/// family's defaults.
pub fn block_devices(family: Family, class: &EC2NodeClass) -> Vec<BlockDeviceMapping> {
    if let Some(m) = &class.spec.block_device_mappings {
        return m.clone();
    }
    let volume = |device: &str, size: &str, root: bool| BlockDeviceMapping {
        device_name: Some(device.to_string()),
        ebs: Some(BlockDevice {
            encrypted: Some(true),
            volume_size: Some(size.to_string()),
            volume_type: Some(VolumeType::Gp3),
            ..BlockDevice::default()
        }),
        root_volume: root.then_some(true),
    };
    match family {
        Family::Al2 | Family::Al2023 => vec![volume("/dev/xvda", "20Gi", true)],
        Family::Bottlerocket => vec![
            volume("/dev/xvda", "4Gi", false),
            volume("/dev/xvdb", "20Gi", true),
        ],
        Family::Windows => vec![volume("/dev/sda1", "50Gi", true)],
        Family::Custom => Vec::new(),
    }
}

/// Everything a launch template holds; its name is a hash of the rest.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TemplateSpec {
    pub image_id: String,
    pub user_data: String,
    pub block_devices: Vec<BlockDeviceMapping>,
    pub metadata: MetadataOptions,
    pub security_group_ids: Vec<String>,
    pub instance_profile: Option<String>,
    pub monitoring: bool,
    pub public_ip: Option<bool>,
    pub nodeclass: String,
    /// `dedicated` when the NodeClaim allows only dedicated tenancy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenancy: Option<String>,
    /// The launch's tags, on the template, and on the network interfaces
    /// (and spot requests) it creates.
    pub tags: BTreeMap<String, String>,
    /// Whether it launches spot (its spot requests are tagged).
    pub spot: bool,
    /// EFA interfaces to attach, one per network card (the instance
    /// types' `vpc.amazonaws.com/efa`), when the NodeClaim requests EFA.
    #[serde(skip_serializing_if = "is_zero")]
    pub efa_interfaces: i64,
    /// An IPv6 cluster: interfaces get a primary IPv6 address.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ipv6: bool,
    /// The node class's `connectionTracking`: idle timeouts of the
    /// interfaces the template configures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// The node class's `ipPrefixCount`: prefixes assigned to the
    /// interfaces (IPv4, or IPv6 in an IPv6 cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_prefix_count: Option<i32>,
    /// The node class's `networkInterfaces`: with them, the template
    /// attaches exactly these (and no EFA of its own choosing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterface>,
    /// The node class's `cpuOptions.nestedVirtualization`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<EnabledDisabled>,
    /// The placement group the instances are placed in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_group: Option<TemplatePlacement>,
    /// The reservation a reserved launch targets; `None`: the instance
    /// uses no reservation (`CapacityReservationPreference: none`).
    /// Always part of the name, so templates made before reservations
    /// were targeted are not reused.
    pub capacity_reservation: Option<TemplateReservation>,
}

pub(super) fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// The placement group a launch template places instances in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TemplatePlacement {
    pub group_id: String,
    /// A partition group's partition (none: EC2 chooses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
}

/// The reservation a launch template targets.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TemplateReservation {
    pub id: String,
    pub capacity_block: bool,
    pub interruptible: bool,
}

impl TemplateReservation {
    pub(super) fn of(r: &CapacityReservation) -> TemplateReservation {
        TemplateReservation {
            id: r.id.clone(),
            capacity_block: r.reservation_type == Some(ReservationType::CapacityBlock),
            interruptible: r.interruptible.unwrap_or(false),
        }
    }
}

impl TemplateSpec {
    /// `dovetail/<cluster>/<hash>`.
    pub fn name(&self, cluster: &str) -> String {
        let canonical = serde_json::to_string(self).unwrap_or_default();
        let mut h = fnv::FnvHasher::default();
        h.write(cluster.as_bytes());
        h.write(&[0]);
        h.write(canonical.as_bytes());
        format!("dovetail/{cluster}/{:016x}", h.finish())
    }

    /// The CreateLaunchTemplate data.
    pub fn request_data(&self) -> aws_sdk_ec2::types::RequestLaunchTemplateData {
        use aws_sdk_ec2::types::{
            LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest,
            LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
            LaunchTemplateInstanceMetadataEndpointState,
            LaunchTemplateInstanceMetadataOptionsRequest,
            LaunchTemplateInstanceMetadataProtocolIpv6, LaunchTemplateInstanceMetadataTagsState,
            LaunchTemplateInstanceNetworkInterfaceSpecificationRequest,
            LaunchTemplatesMonitoringRequest, RequestLaunchTemplateData,
        };
        let m = &self.metadata;
        let enabled = |v: Option<EnabledDisabled>, default: bool| {
            v.map_or(default, |v| v == EnabledDisabled::Enabled)
        };
        let metadata = LaunchTemplateInstanceMetadataOptionsRequest::builder()
            .http_endpoint(if enabled(m.http_endpoint, true) {
                LaunchTemplateInstanceMetadataEndpointState::Enabled
            } else {
                LaunchTemplateInstanceMetadataEndpointState::Disabled
            })
            .http_protocol_ipv6(if enabled(m.http_protocol_ipv6, false) {
                LaunchTemplateInstanceMetadataProtocolIpv6::Enabled
            } else {
                LaunchTemplateInstanceMetadataProtocolIpv6::Disabled
            })
            .http_put_response_hop_limit(
                i32::try_from(m.http_put_response_hop_limit.unwrap_or(1)).unwrap_or(1),
            )
            .http_tokens(match m.http_tokens {
                Some(HttpTokens::Optional) => LaunchTemplateHttpTokensState::Optional,
                _ => LaunchTemplateHttpTokensState::Required,
            })
            // dovetail's tag keys hold `/`, which instance metadata tags
            // refuse: an account whose defaults turn them on would fail
            // every launch. Karpenter disables them too.
            .instance_metadata_tags(LaunchTemplateInstanceMetadataTagsState::Disabled)
            .build();
        let devices = self
            .block_devices
            .iter()
            .map(|b| {
                let ebs = b.ebs.as_ref().map(|e| {
                    LaunchTemplateEbsBlockDeviceRequest::builder()
                        .set_encrypted(e.encrypted)
                        .set_delete_on_termination(Some(e.delete_on_termination.unwrap_or(true)))
                        .set_iops(e.iops.and_then(|v| i32::try_from(v).ok()))
                        .set_throughput(e.throughput.and_then(|v| i32::try_from(v).ok()))
                        .set_kms_key_id(e.kms_key_id.clone())
                        .set_snapshot_id(e.snapshot_id.clone())
                        .set_volume_initialization_rate(e.volume_initialization_rate)
                        .set_volume_size(e.volume_size.as_deref().and_then(gib))
                        .set_volume_type(
                            e.volume_type
                                .map(|t| aws_sdk_ec2::types::VolumeType::from(volume_type(t))),
                        )
                        .build()
                });
                LaunchTemplateBlockDeviceMappingRequest::builder()
                    .set_device_name(b.device_name.clone())
                    .set_ebs(ebs)
                    .build()
            })
            .collect();
        let mut data = RequestLaunchTemplateData::builder()
            .image_id(&self.image_id)
            .user_data(base64::engine::general_purpose::STANDARD.encode(&self.user_data))
            .metadata_options(metadata)
            .set_block_device_mappings(Some(devices))
            .monitoring(
                LaunchTemplatesMonitoringRequest::builder()
                    .enabled(self.monitoring)
                    .build(),
            );
        if let Some(profile) = &self.instance_profile {
            data = data.iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(profile)
                    .build(),
            );
        }
        let tags: Vec<aws_sdk_ec2::types::Tag> = self
            .tags
            .iter()
            .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build())
            .collect();
        let mut tagged = vec![aws_sdk_ec2::types::ResourceType::NetworkInterface];
        if self.spot {
            tagged.push(aws_sdk_ec2::types::ResourceType::SpotInstancesRequest);
        }
        for resource in tagged {
            data = data.tag_specifications(
                aws_sdk_ec2::types::LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(resource)
                    .set_tags(Some(tags.clone()))
                    .build(),
            );
        }
        let dedicated = self.tenancy.as_deref() == Some(TENANCY_DEDICATED);
        if dedicated || self.placement_group.is_some() {
            let mut placement = aws_sdk_ec2::types::LaunchTemplatePlacementRequest::builder();
            if dedicated {
                placement = placement.tenancy(aws_sdk_ec2::types::Tenancy::Dedicated);
            }
            if let Some(pg) = &self.placement_group {
                placement = placement
                    .group_id(&pg.group_id)
                    .set_partition_number(pg.partition);
            }
            data = data.placement(placement.build());
        }
        if let Some(nested) = self.nested_virtualization {
            data = data.cpu_options(
                aws_sdk_ec2::types::LaunchTemplateCpuOptionsRequest::builder()
                    .nested_virtualization(match nested {
                        EnabledDisabled::Enabled => {
                            aws_sdk_ec2::types::NestedVirtualizationSpecification::Enabled
                        }
                        EnabledDisabled::Disabled => {
                            aws_sdk_ec2::types::NestedVirtualizationSpecification::Disabled
                        }
                    })
                    .build(),
            );
        }
        data = data.capacity_reservation_specification(self.reservation_specification());
        if let Some(market) = self.market_type() {
            data = data.instance_market_options(
                aws_sdk_ec2::types::LaunchTemplateInstanceMarketOptionsRequest::builder()
                    .market_type(market)
                    .build(),
            );
        }
        let interface = |card: i64| {
            let mut i = LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                .set_groups(Some(self.security_group_ids.clone()));
            if self.efa_interfaces > 0 {
                // One EFA per network card; the first card's is the
                // primary interface, the others device 1 (Karpenter's
                // layout, so one card keeps priority for a public address).
                i = i
                    .network_card_index(i32::try_from(card).unwrap_or(0))
                    .device_index(if card == 0 { 0 } else { 1 })
                    .interface_type("efa");
            } else {
                i = i.device_index(0);
            }
            self.addressed(i).build()
        };
        if !self.network_interfaces.is_empty() {
            for ni in &self.network_interfaces {
                data = data.network_interfaces(self.configured_interface(ni));
            }
        } else if self.efa_interfaces > 0 {
            for card in 0..self.efa_interfaces {
                data = data.network_interfaces(interface(card));
            }
        } else if self.public_ip.is_some()
            || self.ipv6
            || self.connection_tracking.is_some()
            || self.ip_prefix_count.is_some()
        {
            // A public address, a primary IPv6 address, prefixes or
            // connection tracking are set on the primary interface, which
            // then carries the security groups.
            data = data.network_interfaces(interface(0));
        } else {
            data = data.set_security_group_ids(Some(self.security_group_ids.clone()));
        }
        data.build()
    }
}

/// The CreateLaunchTemplate `LaunchTemplateData` as sent, read back from
/// the SDK's request with EC2's names, for `dovetail aws resolve`. Only what
/// [`TemplateSpec::request_data`] sets is read; a field it starts to set
/// must be added here too (a test compares the two).
pub fn request_data_json(d: &aws_sdk_ec2::types::RequestLaunchTemplateData) -> Value {
    let mut out = serde_json::Map::new();
    let mut put = |k: &str, v: Value| {
        if !v.is_null() {
            out.insert(k.to_string(), v);
        }
    };
    put("ImageId", json!(d.image_id()));
    put("UserData", json!(d.user_data()));
    if let Some(m) = d.metadata_options() {
        put(
            "MetadataOptions",
            json!({
                "HttpEndpoint": m.http_endpoint().map(|v| v.as_str()),
                "HttpProtocolIpv6": m.http_protocol_ipv6().map(|v| v.as_str()),
                "HttpPutResponseHopLimit": m.http_put_response_hop_limit(),
                "HttpTokens": m.http_tokens().map(|v| v.as_str()),
                "InstanceMetadataTags": m.instance_metadata_tags().map(|v| v.as_str()),
            }),
        );
    }
    let devices: Vec<Value> = d
        .block_device_mappings()
        .iter()
        .map(|b| {
            let ebs = b.ebs().map(|e| {
                json!({
                    "DeleteOnTermination": e.delete_on_termination(),
                    "Encrypted": e.encrypted(),
                    "Iops": e.iops(),
                    "KmsKeyId": e.kms_key_id(),
                    "SnapshotId": e.snapshot_id(),
                    "Throughput": e.throughput(),
                    "VolumeInitializationRate": e.volume_initialization_rate(),
                    "VolumeSize": e.volume_size(),
                    "VolumeType": e.volume_type().map(|v| v.as_str()),
                })
            });
            json!({"DeviceName": b.device_name(), "Ebs": ebs})
        })
        .collect();
    put("BlockDeviceMappings", json!(devices));
    put(
        "Monitoring",
        json!(d.monitoring().map(|m| json!({"Enabled": m.enabled()}))),
    );
    put(
        "IamInstanceProfile",
        json!(
            d.iam_instance_profile()
                .map(|p| json!({"Name": p.name(), "Arn": p.arn()}))
        ),
    );
    let tags: Vec<Value> = d
        .tag_specifications()
        .iter()
        .map(|t| {
            let tags: BTreeMap<&str, &str> = t
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?, t.value()?)))
                .collect();
            json!({"ResourceType": t.resource_type().map(|r| r.as_str()), "Tags": tags})
        })
        .collect();
    put("TagSpecifications", json!(tags));
    if let Some(p) = d.placement() {
        put(
            "Placement",
            json!({
                "GroupId": p.group_id(),
                "PartitionNumber": p.partition_number(),
                "Tenancy": p.tenancy().map(|t| t.as_str()),
            }),
        );
    }
    if let Some(c) = d.cpu_options() {
        put(
            "CpuOptions",
            json!({"NestedVirtualization": c.nested_virtualization().map(|n| n.as_str())}),
        );
    }
    if let Some(c) = d.capacity_reservation_specification() {
        put(
            "CapacityReservationSpecification",
            json!({
                "CapacityReservationPreference": c.capacity_reservation_preference().map(|p| p.as_str()),
                "CapacityReservationTarget": c.capacity_reservation_target().map(|t| json!({
                    "CapacityReservationId": t.capacity_reservation_id(),
                })),
            }),
        );
    }
    if let Some(m) = d.instance_market_options() {
        put(
            "InstanceMarketOptions",
            json!({"MarketType": m.market_type().map(|t| t.as_str())}),
        );
    }
    let interfaces: Vec<Value> = d
        .network_interfaces()
        .iter()
        .map(|i| {
            json!({
                "NetworkCardIndex": i.network_card_index(),
                "DeviceIndex": i.device_index(),
                "InterfaceType": i.interface_type(),
                "Groups": i.groups(),
                "AssociatePublicIpAddress": i.associate_public_ip_address(),
                "Ipv4PrefixCount": i.ipv4_prefix_count(),
                "Ipv6PrefixCount": i.ipv6_prefix_count(),
                "Ipv6AddressCount": i.ipv6_address_count(),
                "PrimaryIpv6": i.primary_ipv6(),
                "ConnectionTrackingSpecification": i.connection_tracking_specification().map(|c| json!({
                    "TcpEstablishedTimeout": c.tcp_established_timeout(),
                    "UdpStreamTimeout": c.udp_stream_timeout(),
                    "UdpTimeout": c.udp_timeout(),
                })),
            })
        })
        .collect();
    put("NetworkInterfaces", json!(interfaces));
    put("SecurityGroupIds", json!(d.security_group_ids()));
    strip_nulls(Value::Object(out))
}

/// `v` without null members and empty lists: what the request leaves out.
pub(super) fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null() && !v.as_array().is_some_and(Vec::is_empty))
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

impl TemplateSpec {
    /// One of the node class's `networkInterfaces`, as Karpenter's
    /// generateNetworkInterfaces writes it: an EFA-only interface gets no
    /// prefixes, public address, IPv6 address nor connection tracking
    /// (EC2 refuses them on it); every interface carries the security
    /// groups.
    fn configured_interface(
        &self,
        ni: &NetworkInterface,
    ) -> aws_sdk_ec2::types::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest {
        let i =
            aws_sdk_ec2::types::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                .network_card_index(ni.network_card_index)
                .device_index(ni.device_index)
                .interface_type(match ni.interface_type {
                    InterfaceType::Interface => "interface",
                    InterfaceType::EfaOnly => "efa-only",
                })
                .set_groups(Some(self.security_group_ids.clone()));
        match ni.interface_type {
            InterfaceType::Interface => self.addressed(i).build(),
            InterfaceType::EfaOnly => i.build(),
        }
    }

    /// What Karpenter's generateNetworkInterfaces sets on every interface
    /// but an EFA-only one: the public address, a primary IPv6 address in
    /// an IPv6 cluster, the prefixes of the cluster's address family, and
    /// the connection tracking timeouts.
    fn addressed(
        &self,
        i: aws_sdk_ec2::types::builders::LaunchTemplateInstanceNetworkInterfaceSpecificationRequestBuilder,
    ) -> aws_sdk_ec2::types::builders::LaunchTemplateInstanceNetworkInterfaceSpecificationRequestBuilder
    {
        let mut i = i.set_associate_public_ip_address(self.public_ip);
        if self.ipv6 {
            i = i
                .primary_ipv6(true)
                .ipv6_address_count(1)
                .set_ipv6_prefix_count(self.ip_prefix_count);
        } else {
            i = i.set_ipv4_prefix_count(self.ip_prefix_count);
        }
        if let Some(ct) = &self.connection_tracking {
            i = i.connection_tracking_specification(
                aws_sdk_ec2::types::ConnectionTrackingSpecificationRequest::builder()
                    .set_tcp_established_timeout(ct.tcp_established_timeout)
                    .set_udp_stream_timeout(ct.udp_stream_timeout)
                    .set_udp_timeout(ct.udp_timeout)
                    .build(),
            );
        }
        i
    }

    /// Only the targeted reservation for a reserved launch; no reservation
    /// at all for others (not even an open one), as Karpenter launches
    /// with `ReservedCapacity` on.
    fn reservation_specification(
        &self,
    ) -> aws_sdk_ec2::types::LaunchTemplateCapacityReservationSpecificationRequest {
        use aws_sdk_ec2::types::{
            CapacityReservationPreference, CapacityReservationTarget,
            LaunchTemplateCapacityReservationSpecificationRequest,
        };
        match &self.capacity_reservation {
            Some(r) => LaunchTemplateCapacityReservationSpecificationRequest::builder()
                .capacity_reservation_preference(
                    CapacityReservationPreference::CapacityReservationsOnly,
                )
                .capacity_reservation_target(
                    CapacityReservationTarget::builder()
                        .capacity_reservation_id(&r.id)
                        .build(),
                )
                .build(),
            None => LaunchTemplateCapacityReservationSpecificationRequest::builder()
                .capacity_reservation_preference(CapacityReservationPreference::None)
                .build(),
        }
    }

    /// The market of a capacity block or an interruptible reservation.
    fn market_type(&self) -> Option<aws_sdk_ec2::types::MarketType> {
        use aws_sdk_ec2::types::MarketType;
        let r = self.capacity_reservation.as_ref()?;
        if r.capacity_block {
            Some(MarketType::CapacityBlock)
        } else if r.interruptible {
            Some(MarketType::InterruptibleCapacityReservation)
        } else {
            None
        }
    }
}

pub(super) fn volume_type(t: VolumeType) -> &'static str {
    match t {
        VolumeType::Standard => "standard",
        VolumeType::Io1 => "io1",
        VolumeType::Io2 => "io2",
        VolumeType::Gp2 => "gp2",
        VolumeType::Sc1 => "sc1",
        VolumeType::St1 => "st1",
        VolumeType::Gp3 => "gp3",
    }
}

/// A volume size in whole GiB, rounded up (`100Gi`, `100G`, `1Ti`).
pub(super) fn gib(size: &str) -> Option<i32> {
    let bytes = crate::model::quantity::parse_quantity("ephemeral-storage", size).ok()?;
    i32::try_from((bytes + (1 << 30) - 1) >> 30).ok()
}
