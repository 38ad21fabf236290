use super::*;

#[test]
fn template_names_are_stable_and_change_with_any_input() {
    let t = TemplateSpec {
        image_id: "ami-1".into(),
        user_data: "x".into(),
        block_devices: block_devices(Family::Al2023, &EC2NodeClass::test("d")),
        metadata: MetadataOptions::defaulted(),
        security_group_ids: vec!["sg-1".into()],
        instance_profile: Some("p".into()),
        monitoring: false,
        public_ip: None,
        nodeclass: "default".into(),
        tenancy: None,
        tags: BTreeMap::from([("team".to_string(), "a".to_string())]),
        spot: true,
        efa_interfaces: 0,
        ipv6: false,
        connection_tracking: None,
        ip_prefix_count: None,
        network_interfaces: Vec::new(),
        nested_virtualization: None,
        placement_group: None,
        capacity_reservation: None,
    };
    let name = t.name("prod");
    // Without EFA nor IPv6 those fields stay out of the hashed form.
    let canonical = serde_json::to_string(&t).expect("json");
    assert!(
        !canonical.contains("\"efa_interfaces\"") && !canonical.contains("\"ipv6\""),
        "{canonical}"
    );
    for change in [
        TemplateSpec {
            efa_interfaces: 1,
            ..t.clone()
        },
        TemplateSpec {
            ipv6: true,
            ..t.clone()
        },
    ] {
        assert_ne!(change.name("prod"), name);
    }
    assert!(name.starts_with("dovetail/prod/") && name.len() == "dovetail/prod/".len() + 16);
    assert_eq!(name, t.clone().name("prod"));
    let mut other = t.clone();
    other.image_id = "ami-2".into();
    assert_ne!(other.name("prod"), name);
    assert_ne!(t.name("staging"), name);
    let data = t.request_data();
    assert_eq!(data.image_id(), Some("ami-1"));
    assert_eq!(
        data.metadata_options()
            .and_then(|m| m.http_tokens())
            .map(|t| t.as_str()),
        Some("required")
    );
    assert_eq!(
        data.metadata_options()
            .and_then(|m| m.instance_metadata_tags())
            .map(|t| t.as_str()),
        Some("disabled")
    );
    assert_eq!(
        data.block_device_mappings()[0]
            .ebs()
            .and_then(|e| e.volume_size()),
        Some(20)
    );
    // Network interfaces and (for spot) spot requests carry the tags.
    let tagged: Vec<&str> = data
        .tag_specifications()
        .iter()
        .filter(|t| t.tags().iter().any(|t| t.key() == Some("team")))
        .filter_map(|t| t.resource_type().map(|r| r.as_str()))
        .collect();
    assert_eq!(tagged, ["network-interface", "spot-instances-request"]);
    assert_eq!(gib("100G"), Some(94));
    assert_eq!(gib("1Ti"), Some(1024));
}

/// `aws resolve` prints every top-level field the request sets, with
/// EC2's names (read from the request's own Debug form), metadata
/// options included with `InstanceMetadataTags`.
#[test]
fn the_printed_template_data_is_the_request_data() {
    let mut t = TemplateSpec {
        image_id: "ami-1".into(),
        user_data: "x".into(),
        block_devices: block_devices(Family::Al2023, &EC2NodeClass::test("d")),
        metadata: MetadataOptions::defaulted(),
        security_group_ids: vec!["sg-1".into()],
        instance_profile: Some("p".into()),
        monitoring: true,
        public_ip: None,
        nodeclass: "default".into(),
        tenancy: Some(TENANCY_DEDICATED.into()),
        tags: BTreeMap::from([("team".to_string(), "a".to_string())]),
        spot: true,
        efa_interfaces: 0,
        ipv6: false,
        connection_tracking: None,
        ip_prefix_count: Some(1),
        network_interfaces: Vec::new(),
        nested_virtualization: Some(EnabledDisabled::Enabled),
        placement_group: Some(TemplatePlacement {
            group_id: "pg-1".into(),
            partition: None,
        }),
        capacity_reservation: None,
    };
    for spot in [true, false] {
        t.spot = spot;
        let data = t.request_data();
        let json = request_data_json(&data);
        let debug = format!("{data:?}");
        // The top-level `name: value` pairs of the Debug form.
        let inner = &debug[debug.find('{').expect("a struct") + 1..debug.len() - 1];
        let (mut depth, mut start, mut fields) = (0i32, 0usize, Vec::new());
        for (i, c) in inner.char_indices() {
            match c {
                '{' | '[' | '(' => depth += 1,
                '}' | ']' | ')' => depth -= 1,
                ',' if depth == 0 => {
                    fields.push(inner[start..i].trim().to_string());
                    start = i + 1;
                }
                _ => {}
            }
        }
        fields.push(inner[start..].trim().to_string());
        let set: BTreeSet<String> = fields
            .iter()
            .filter_map(|f| f.split_once(": "))
            .filter(|(_, v)| *v != "None" && *v != "[]")
            .map(|(k, _)| {
                k.split('_')
                    .map(|w| w[..1].to_uppercase() + &w[1..])
                    .collect::<String>()
            })
            .collect();
        let printed: BTreeSet<String> = json
            .as_object()
            .expect("an object")
            .keys()
            .cloned()
            .collect();
        assert_eq!(printed, set, "{debug}");
        assert_eq!(json["MetadataOptions"]["InstanceMetadataTags"], "disabled");
        assert_eq!(json["MetadataOptions"]["HttpTokens"], "required");
        assert_eq!(json["Placement"]["GroupId"], "pg-1");
        assert_eq!(json["CpuOptions"]["NestedVirtualization"], "enabled");
    }
}

/// launchtemplate_test.go: a node class's network interfaces are the
/// template's, each with the security groups; an EFA-only one gets no
/// prefixes, public address, IPv6 address nor connection tracking (EC2
/// refuses them). CPU options carry nested virtualization; the
/// placement names the group and partition beside a dedicated tenancy.
#[test]
fn configured_interfaces_cpu_options_and_placement_are_sent() {
    let interfaces: Vec<NetworkInterface> = serde_json::from_value(json!([
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
    ]))
    .expect("interfaces");
    let t = TemplateSpec {
        image_id: "ami-1".into(),
        user_data: "x".into(),
        block_devices: Vec::new(),
        metadata: MetadataOptions::defaulted(),
        security_group_ids: vec!["sg-1".into(), "sg-2".into()],
        instance_profile: None,
        monitoring: false,
        public_ip: Some(true),
        nodeclass: "default".into(),
        tenancy: Some(TENANCY_DEDICATED.into()),
        tags: BTreeMap::new(),
        spot: false,
        // The type's EFA count does not add interfaces of its own.
        efa_interfaces: 2,
        ipv6: false,
        connection_tracking: Some(ConnectionTracking {
            tcp_established_timeout: Some(600),
            ..Default::default()
        }),
        ip_prefix_count: Some(1),
        network_interfaces: interfaces,
        nested_virtualization: Some(EnabledDisabled::Enabled),
        placement_group: Some(TemplatePlacement {
            group_id: "pg-1".into(),
            partition: Some(2),
        }),
        capacity_reservation: None,
    };
    let data = t.request_data();
    assert!(data.security_group_ids().is_empty());
    let [primary, efa] = data.network_interfaces() else {
        panic!("two interfaces: {:?}", data.network_interfaces());
    };
    assert_eq!(
        (
            primary.network_card_index(),
            primary.device_index(),
            primary.interface_type(),
            primary.ipv4_prefix_count(),
            primary.associate_public_ip_address(),
        ),
        (Some(0), Some(0), Some("interface"), Some(1), Some(true))
    );
    assert!(primary.connection_tracking_specification().is_some());
    assert_eq!(
        (
            efa.network_card_index(),
            efa.device_index(),
            efa.interface_type(),
            efa.ipv4_prefix_count(),
            efa.associate_public_ip_address(),
        ),
        (Some(1), Some(0), Some("efa-only"), None, None)
    );
    assert!(efa.connection_tracking_specification().is_none());
    assert_eq!(efa.groups(), ["sg-1", "sg-2"]);
    let v6 = TemplateSpec {
        ipv6: true,
        ..t.clone()
    }
    .request_data();
    assert_eq!(v6.network_interfaces()[0].primary_ipv6(), Some(true));
    assert_eq!(v6.network_interfaces()[0].ipv6_address_count(), Some(1));
    assert_eq!(v6.network_interfaces()[1].primary_ipv6(), None);
    assert_eq!(v6.network_interfaces()[1].ipv6_address_count(), None);
    assert_eq!(
        data.cpu_options()
            .and_then(|c| c.nested_virtualization())
            .map(|n| n.as_str()),
        Some("enabled")
    );
    let placement = data.placement().expect("placement");
    assert_eq!(placement.group_id(), Some("pg-1"));
    assert_eq!(placement.partition_number(), Some(2));
    assert_eq!(placement.tenancy().map(|t| t.as_str()), Some("dedicated"));
    // None of them set, none sent.
    let plain = TemplateSpec {
        network_interfaces: Vec::new(),
        nested_virtualization: None,
        placement_group: None,
        tenancy: None,
        efa_interfaces: 0,
        ..t.clone()
    }
    .request_data();
    assert!(plain.cpu_options().is_none() && plain.placement().is_none());
    // Each is part of the template's name.
    let name = t.name("prod");
    for change in [
        TemplateSpec {
            network_interfaces: Vec::new(),
            ..t.clone()
        },
        TemplateSpec {
            nested_virtualization: Some(EnabledDisabled::Disabled),
            ..t.clone()
        },
        TemplateSpec {
            placement_group: None,
            ..t.clone()
        },
    ] {
        assert_ne!(change.name("prod"), name);
    }
}

/// launchtemplate_test.go: connection tracking and IP prefixes on the
/// primary interface (which then carries the security groups), IPv6
/// prefixes in an IPv6 cluster, and the volume initialization rate on
/// its block device, as Karpenter's launch template builder sends them.
#[test]
fn connection_tracking_prefixes_and_initialization_rate_are_sent() {
    let mut devices = block_devices(Family::Al2023, &EC2NodeClass::test("d"));
    if let Some(ebs) = devices[0].ebs.as_mut() {
        ebs.snapshot_id = Some("snap-1".into());
        ebs.volume_initialization_rate = Some(200);
    }
    let t = TemplateSpec {
        image_id: "ami-1".into(),
        user_data: "x".into(),
        block_devices: devices,
        metadata: MetadataOptions::defaulted(),
        security_group_ids: vec!["sg-1".into()],
        instance_profile: None,
        monitoring: false,
        public_ip: None,
        nodeclass: "default".into(),
        tenancy: None,
        tags: BTreeMap::new(),
        spot: false,
        efa_interfaces: 0,
        ipv6: false,
        connection_tracking: Some(ConnectionTracking {
            tcp_established_timeout: Some(3600),
            udp_stream_timeout: None,
            udp_timeout: Some(30),
        }),
        ip_prefix_count: Some(2),
        network_interfaces: Vec::new(),
        nested_virtualization: None,
        placement_group: None,
        capacity_reservation: None,
    };
    let data = t.request_data();
    assert!(data.security_group_ids().is_empty(), "on the interface");
    let [primary] = data.network_interfaces() else {
        panic!("one interface: {:?}", data.network_interfaces());
    };
    assert_eq!(primary.device_index(), Some(0));
    assert_eq!(primary.groups(), ["sg-1"]);
    assert_eq!(primary.ipv4_prefix_count(), Some(2));
    assert_eq!(primary.ipv6_prefix_count(), None);
    let ct = primary
        .connection_tracking_specification()
        .expect("tracking");
    assert_eq!(
        (
            ct.tcp_established_timeout(),
            ct.udp_stream_timeout(),
            ct.udp_timeout()
        ),
        (Some(3600), None, Some(30))
    );
    assert_eq!(
        data.block_device_mappings()[0]
            .ebs()
            .and_then(|e| e.volume_initialization_rate()),
        Some(200)
    );
    let v6 = TemplateSpec {
        ipv6: true,
        ..t.clone()
    }
    .request_data();
    assert_eq!(v6.network_interfaces()[0].ipv6_prefix_count(), Some(2));
    assert_eq!(v6.network_interfaces()[0].ipv4_prefix_count(), None);
    // Each is part of the template's name.
    for change in [
        TemplateSpec {
            ip_prefix_count: Some(3),
            ..t.clone()
        },
        TemplateSpec {
            connection_tracking: None,
            ..t.clone()
        },
    ] {
        assert_ne!(change.name("prod"), t.name("prod"));
    }
}
