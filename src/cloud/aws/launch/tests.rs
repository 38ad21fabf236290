#[test]
fn batches_fit_their_names_in_a_tag_value() {
    let names: Vec<String> = (0..40).map(|i| format!("default-{i:05}")).collect();
    let cut = super::batches(&names, 256);
    assert_eq!(cut.iter().map(|b| b.len()).sum::<usize>(), 40);
    assert!(cut.iter().all(|b| b.join(",").len() <= 256));
    // 13 characters and a comma each: 18 fit in 256.
    assert_eq!(cut[0].len(), 18);
    let long = vec!["x".repeat(300), "y".into()];
    assert_eq!(super::batches(&long, 256).len(), 2);
    assert!(super::batches(&[], 256).is_empty());
}

use super::*;

/// No reservation known.
fn no_reservations() -> &'static Availability {
    static NONE: std::sync::OnceLock<Availability> = std::sync::OnceLock::new();
    NONE.get_or_init(Availability::default)
}
use crate::api::common::{Taint, TaintEffect};

fn access() -> ClusterAccess {
    ClusterAccess {
        endpoint: Some("https://ABC.gr7.us-east-1.eks.amazonaws.com".into()),
        ca_bundle: Some("Q0EK".into()),
        service_cidr: Some("10.100.0.0/16".into()),
        dns_ip: None,
    }
}

fn claim() -> NodeClaim {
    let mut c = NodeClaim::test("default-abc");
    c.metadata.labels = Some(BTreeMap::from([
        ("karpenter.sh/nodepool".into(), "default".into()),
        ("team".into(), "a".into()),
        ("node.kubernetes.io/instance-type".into(), "m5.large".into()),
        ("node-role.kubernetes.io/worker".into(), "".into()),
        ("example.k8s.io/tier".into(), "a".into()),
    ]));
    c.spec.taints = Some(vec![Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: TaintEffect::NoSchedule,
        time_added: None,
    }]);
    c
}

#[test]
fn registration_keeps_pool_and_custom_labels_and_adds_the_unregistered_taint() {
    let r = Registration::of(&claim());
    // Not node-role.kubernetes.io or example.k8s.io: the kubelet refuses
    // them (the NodeClaim sets them at registration).
    assert_eq!(
        r.labels.keys().collect::<Vec<_>>(),
        ["karpenter.sh/nodepool", "team"]
    );
    assert!(
        kubelet_may_set("kubelet.kubernetes.io/x") && kubelet_may_set("a.node.kubernetes.io/x")
    );
    assert!(!kubelet_may_set("kubernetes.io/x") && !kubelet_may_set("k8s.io/x"));
    assert!(kubelet_may_set("team") && kubelet_may_set("example.com/k8s.io"));
    assert_eq!(
        r.taints,
        [
            "karpenter.sh/unregistered:NoExecute",
            "dedicated=gpu:NoSchedule"
        ]
    );
}

#[test]
fn al2023_user_data_merges_the_users_node_config_first() {
    let mut class = EC2NodeClass::test("default");
    class.spec.user_data = Some(
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n"
            .into(),
    );
    class.spec.kubelet = Some(KubeletConfiguration {
        max_pods: Some(110),
        ..KubeletConfiguration::default()
    });
    let a = access();
    let cluster = ClusterInfo {
        name: "prod",
        access: &a,
    };
    let ud = user_data(
        Family::Al2023,
        &class,
        cluster,
        &Registration::of(&claim()),
        29,
    )
    .expect("renders");
    let parts = parse_mime(&ud).expect("MIME");
    assert_eq!(parts.len(), 2);
    assert!(parts[0].body.contains("shutdownGracePeriod"));
    let ours: Value = serde_json::from_str(&parts[1].body).expect("JSON NodeConfig");
    assert_eq!(ours["spec"]["cluster"]["name"], "prod");
    assert_eq!(ours["spec"]["cluster"]["cidr"], "10.100.0.0/16");
    assert_eq!(ours["spec"]["kubelet"]["config"]["maxPods"], 110);
    assert_eq!(
        ours["spec"]["kubelet"]["config"]["clusterDNS"],
        json!(["10.100.0.10"])
    );
    let flags = ours["spec"]["kubelet"]["flags"].to_string();
    assert!(
        flags.contains("--node-labels=karpenter.sh/nodepool=default,team=a"),
        "{flags}"
    );
    assert!(
        flags.contains("karpenter.sh/unregistered:NoExecute"),
        "{flags}"
    );

    // A MIME document keeps its parts.
    class.spec.user_data = Some(render_mime(&[Part {
        content_type: "text/x-shellscript".into(),
        body: "#!/bin/bash\necho hi".into(),
    }]));
    let ud = user_data(
        Family::Al2023,
        &class,
        cluster,
        &Registration::default(),
        29,
    )
    .expect("renders");
    let parts = parse_mime(&ud).expect("MIME");
    assert_eq!(parts[0].content_type, "text/x-shellscript");
    assert_eq!(parts[0].body, "#!/bin/bash\necho hi");

    let none = ClusterAccess::default();
    let e = user_data(
        Family::Al2023,
        &class,
        ClusterInfo {
            name: "prod",
            access: &none,
        },
        &Registration::default(),
        29,
    )
    .unwrap_err();
    assert!(e.contains("cluster endpoint"), "{e}");
    // nodeadm needs the service CIDR.
    let no_cidr = ClusterAccess {
        service_cidr: None,
        ..access()
    };
    let e = user_data(
        Family::Al2023,
        &class,
        ClusterInfo {
            name: "prod",
            access: &no_cidr,
        },
        &Registration::default(),
        29,
    )
    .unwrap_err();
    assert!(e.contains("--service-cidr"), "{e}");
}

/// The `instanceStorePolicy: RAID0` class of `family`, as rendered for
/// 58 pods.
fn raid0_user_data(family: Family, alias: &str) -> String {
    let mut class = EC2NodeClass::test("default");
    class.spec.ami_selector_terms[0].alias = Some(alias.into());
    class.spec.instance_store_policy = Some(InstanceStorePolicy::RAID0);
    let a = access();
    let cluster = ClusterInfo {
        name: "prod",
        access: &a,
    };
    user_data(family, &class, cluster, &Registration::of(&claim()), 58).expect("renders")
}

#[test]
fn raid0_instance_stores_are_configured_in_every_familys_user_data() {
    // AL2023: nodeadm's local storage strategy.
    let ud = raid0_user_data(Family::Al2023, "al2023@latest");
    let parts = parse_mime(&ud).expect("MIME");
    let ours: Value = serde_json::from_str(&parts[0].body).expect("JSON NodeConfig");
    assert_eq!(
        ours["spec"]["instance"]["localStorage"]["strategy"],
        "RAID0"
    );
    assert_eq!(ours["spec"]["kubelet"]["config"]["maxPods"], 58);
    // AL2: bootstrap.sh's flag.
    let ud = raid0_user_data(Family::Al2, "al2@latest");
    assert!(ud.contains("--local-disks raid0"), "{ud}");
    // Bottlerocket: a bootstrap command that formats and binds the
    // instance store; 1.46 and later bind the default directories.
    for (alias, bind) in [
        (
            "bottlerocket@latest",
            vec!["apiclient", "ephemeral-storage", "bind"],
        ),
        (
            "bottlerocket@v1.45.0",
            vec![
                "apiclient",
                "ephemeral-storage",
                "bind",
                "--dirs",
                "/var/lib/containerd",
                "/var/lib/kubelet",
                "/var/log/pods",
            ],
        ),
    ] {
        let ud = raid0_user_data(Family::Bottlerocket, alias);
        let doc: toml_edit::DocumentMut = ud.parse().expect("TOML");
        let c = &doc["settings"]["bootstrap-commands"]["000-mount-instance-storage"];
        assert_eq!(c["mode"].as_str(), Some("always"), "{ud}");
        assert_eq!(c["essential"].as_bool(), Some(true), "{ud}");
        let commands: Vec<Vec<String>> = c["commands"]
            .as_array()
            .expect("commands")
            .iter()
            .map(|c| {
                c.as_array()
                    .expect("a command")
                    .iter()
                    .map(|w| w.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .collect();
        assert_eq!(
            commands,
            [vec!["apiclient", "ephemeral-storage", "init"], bind.clone()],
            "{alias}"
        );
        assert_eq!(
            doc["settings"]["kubernetes"]["max-pods"].as_integer(),
            Some(58)
        );
    }
    // Without the policy, nothing of it.
    let mut class = EC2NodeClass::test("default");
    class.spec.ami_selector_terms[0].alias = Some("al2@latest".into());
    let a = access();
    let cluster = ClusterInfo {
        name: "prod",
        access: &a,
    };
    let ud =
        user_data(Family::Al2, &class, cluster, &Registration::default(), 29).expect("renders");
    assert!(!ud.contains("raid0"), "{ud}");
}

#[test]
fn bottlerocket_settings_merge_into_the_users_toml() {
    let mut class = EC2NodeClass::test("default");
    class.spec.ami_family = Some(crate::api::ec2nodeclass::AmiFamily::Bottlerocket);
    class.spec.user_data = Some(
        "[settings.kubernetes]\ncluster-name = \"wrong\"\n[settings.kubernetes.node-labels]\nowner = \"me\"\n[settings.host-containers.admin]\nenabled = true\n".into(),
    );
    let a = access();
    let ud = user_data(
        Family::Bottlerocket,
        &class,
        ClusterInfo {
            name: "prod",
            access: &a,
        },
        &Registration::of(&claim()),
        29,
    )
    .expect("renders");
    let doc: toml_edit::DocumentMut = ud.parse().expect("TOML");
    let k = &doc["settings"]["kubernetes"];
    assert_eq!(k["cluster-name"].as_str(), Some("prod"));
    assert_eq!(k["max-pods"].as_integer(), Some(29));
    assert_eq!(k["cluster-dns-ip"].as_str(), Some("10.100.0.10"));
    assert_eq!(k["node-labels"]["owner"].as_str(), Some("me"));
    assert_eq!(k["node-labels"]["team"].as_str(), Some("a"));
    assert_eq!(
        k["node-taints"]["karpenter.sh/unregistered"]
            .as_array()
            .and_then(|a| a.get(0))
            .and_then(|v| v.as_str()),
        Some(":NoExecute")
    );
    assert_eq!(
        doc["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
        Some(true)
    );
    class.spec.user_data = Some("not = [toml".into());
    assert!(
        user_data(
            Family::Bottlerocket,
            &class,
            ClusterInfo {
                name: "p",
                access: &a
            },
            &Registration::default(),
            29
        )
        .is_err()
    );
}

#[test]
fn al2_and_windows_bootstrap_and_custom_passes_through() {
    let mut class = EC2NodeClass::test("default");
    class.spec.kubelet = Some(KubeletConfiguration {
        max_pods: Some(20),
        ..KubeletConfiguration::default()
    });
    let a = access();
    let cluster = ClusterInfo {
        name: "prod",
        access: &a,
    };
    let ud = user_data(
        Family::Al2,
        &class,
        cluster,
        &Registration::of(&claim()),
        29,
    )
    .expect("renders");
    assert!(
        ud.contains("/etc/eks/bootstrap.sh 'prod' --apiserver-endpoint"),
        "{ud}"
    );
    assert!(ud.contains("--use-max-pods false"), "{ud}");
    assert!(ud.contains("--max-pods=20"), "{ud}");
    let win = user_data(
        Family::Windows,
        &class,
        cluster,
        &Registration::default(),
        29,
    )
    .expect("renders");
    assert!(
        win.starts_with("<powershell>") && win.contains("-EKSClusterName 'prod'"),
        "{win}"
    );
    assert!(win.contains("--max-pods=20"), "{win}");
    // Without maxPods in the class, the launch's pods are passed: the
    // bootstrap never computes its own.
    class.spec.kubelet = Some(KubeletConfiguration {
        kube_reserved: Some(BTreeMap::from([("cpu".into(), "200m".into())])),
        eviction_hard: Some(BTreeMap::from([("memory.available".into(), "5%".into())])),
        ..KubeletConfiguration::default()
    });
    let ud = user_data(
        Family::Al2,
        &class,
        cluster,
        &Registration::of(&claim()),
        17,
    )
    .expect("renders");
    assert!(ud.contains("--use-max-pods false"), "{ud}");
    assert!(ud.contains("--max-pods=17"), "{ud}");
    assert!(ud.contains("--kube-reserved=cpu=200m"), "{ud}");
    assert!(ud.contains("--eviction-hard=memory.available<5%"), "{ud}");
    let win = user_data(
        Family::Windows,
        &class,
        cluster,
        &Registration::default(),
        110,
    )
    .expect("renders");
    assert!(win.contains("--max-pods=110"), "{win}");
    class.spec.user_data = Some("anything".into());
    assert_eq!(
        user_data(
            Family::Custom,
            &class,
            cluster,
            &Registration::default(),
            29
        )
        .as_deref(),
        Ok("anything")
    );
}

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

/// Three types in two zones, priced; m6g.large is arm64, and the
/// resolution has an amd64 image only.
fn plan_input_types() -> Vec<InstanceType> {
    use crate::cloud::aws::instance_types::{NodeClassSettings, Overheads, TypeInfo};
    let base = crate::cloud::aws::instance_types::tests::m5_large();
    let settings = NodeClassSettings::of(&EC2NodeClass::test("default")).expect("settings");
    let o = Overheads {
        vm_memory_overhead: 0.075,
        reserved_enis: 0,
    };
    let offer = |zone: &str, ct: &str, price: f64| crate::model::Offering {
        zone: zone.into(),
        capacity_type: ct.into(),
        price,
        available: true,
        reservations: Vec::new(),
    };
    let make = |name: &str, arch: &str, od: f64, spot: f64| {
        let info = TypeInfo {
            name: name.into(),
            arch: arch.into(),
            ..base.clone()
        };
        crate::cloud::aws::instance_types::instance_type(
            &info,
            &settings,
            &o,
            "us-east-1",
            vec![
                offer("us-east-1a", "on-demand", od),
                offer("us-east-1b", "on-demand", od),
                offer("us-east-1a", "spot", spot),
                offer("us-east-1b", "spot", spot * 1.1),
            ],
        )
    };
    vec![
        make("m5.large", "amd64", 0.096, 0.04),
        make("c5.large", "amd64", 0.085, 0.035),
        make("m6g.large", "arm64", 0.077, 0.03),
    ]
}

fn resolution() -> NodeClassResolution {
    use crate::api::ec2nodeclass::{SecurityGroup, Subnet};
    NodeClassResolution {
        amis: vec![Ami {
            deprecated: None,
            id: "ami-amd64".into(),
            name: None,
            requirements: crate::cloud::select::variant_requirements("amd64", "standard"),
        }],
        subnets: vec![
            Subnet {
                id: "subnet-a".into(),
                zone: "us-east-1a".into(),
                zone_id: None,
            },
            Subnet {
                id: "subnet-b".into(),
                zone: "us-east-1b".into(),
                zone_id: None,
            },
        ],
        security_groups: vec![SecurityGroup {
            id: "sg-1".into(),
            name: None,
        }],
        instance_profile: Some("profile".into()),
        capacity_reservations: Vec::new(),
        problems: Vec::new(),
    }
}

fn claim_allowing(capacity_types: &[&str]) -> NodeClaim {
    let mut c = claim();
    c.spec.requirements = vec![crate::api::NodeSelectorRequirementWithMinValues::new(
        "karpenter.sh/capacity-type",
        crate::api::Operator::In,
        capacity_types,
    )];
    c
}

#[test]
fn plans_prefer_spot_order_by_price_and_skip_what_cannot_launch() {
    let types = plan_input_types();
    let class = EC2NodeClass::test("default");
    let a = access();
    let r = resolution();
    let none = BTreeSet::new();
    let no_subnets = BTreeSet::new();
    let input = |unavailable| PlanInput {
        cluster: ClusterInfo {
            name: "prod",
            access: &a,
        },
        class: &class,
        family: Family::Al2023,
        resolution: &r,
        types: &types,
        unavailable,
        unavailable_subnets: &no_subnets,
        spot_unavailable: false,
        reservations: &[],
        availability: no_reservations(),
        placement: None,
    };
    let p = plan(&claim_allowing(&["spot", "on-demand"]), &input(&none)).expect("plans");
    assert_eq!(p.capacity_type, "spot");
    // One template (one image); the arm64 type has no image.
    assert_eq!(p.configs.len(), 1);
    let order: Vec<(&str, &str)> = p.configs[0]
        .1
        .iter()
        .map(|o| (o.instance_type.as_str(), o.subnet_id.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            ("c5.large", "subnet-a"),
            ("c5.large", "subnet-b"),
            ("m5.large", "subnet-a"),
            ("m5.large", "subnet-b"),
        ]
    );
    assert_eq!(p.tags["kubernetes.io/cluster/prod"], "owned");
    assert_eq!(p.tags["karpenter.sh/nodepool"], "default");
    assert!(!p.tags.contains_key(TAG_NODECLAIM), "tagged per claim");
    assert_eq!(p.configs[0].0.image_id, "ami-amd64");
    assert_eq!(p.configs[0].0.instance_profile.as_deref(), Some("profile"));

    // On demand only: lowest price first, on-demand offerings.
    let p = plan(&claim_allowing(&["on-demand"]), &input(&none)).expect("plans");
    assert_eq!(p.capacity_type, "on-demand");
    assert_eq!(p.configs[0].1[0].price, 0.085);

    // Offerings known to be out are skipped; none left is insufficient
    // capacity naming them.
    let out: BTreeSet<OfferingKey> = ["c5.large", "m5.large"]
        .iter()
        .flat_map(|t| {
            ["us-east-1a", "us-east-1b"].map(|z| OfferingKey {
                instance_type: t.to_string(),
                zone: z.to_string(),
                capacity_type: "on-demand".to_string(),
            })
        })
        .collect();
    let mut partial = out.clone();
    partial.retain(|o| o.instance_type == "c5.large");
    let p = plan(&claim_allowing(&["on-demand"]), &input(&partial)).expect("plans");
    assert!(p.configs[0].1.iter().all(|o| o.instance_type == "m5.large"));
    let err = plan(&claim_allowing(&["on-demand"]), &input(&out)).unwrap_err();
    assert_eq!(
        err,
        CloudError::InsufficientCapacity {
            offerings: out.iter().cloned().collect()
        }
    );
    // A requirement nothing meets is an invalid request.
    let mut odd = claim_allowing(&["on-demand"]);
    odd.spec
        .requirements
        .push(crate::api::NodeSelectorRequirementWithMinValues::new(
            "node.kubernetes.io/instance-type",
            crate::api::Operator::In,
            &["x9.huge"],
        ));
    assert!(matches!(
        plan(&odd, &input(&none)),
        Err(CloudError::InvalidRequest(_))
    ));

    // Spot out (no service-linked role): on demand.
    let p = plan(
        &claim_allowing(&["spot", "on-demand"]),
        &PlanInput {
            spot_unavailable: true,
            reservations: &[],
            availability: no_reservations(),
            placement: None,
            ..input(&none)
        },
    )
    .expect("plans");
    assert_eq!(p.capacity_type, "on-demand");
    // A subnet out of addresses: its zone is not launched into.
    let full = BTreeSet::from(["subnet-a".to_string()]);
    let p = plan(
        &claim_allowing(&["on-demand"]),
        &PlanInput {
            unavailable_subnets: &full,
            ..input(&none)
        },
    )
    .expect("plans");
    assert!(
        p.configs[0].1.iter().all(|o| o.subnet_id == "subnet-b"),
        "{:?}",
        p.configs
    );
}

/// A type like m5.large named `name`, priced `od` on demand and `spot`
/// in us-east-1a, changed by `f`.
fn priced(
    name: &str,
    od: f64,
    spot: f64,
    f: impl Fn(&mut crate::cloud::aws::instance_types::TypeInfo),
) -> InstanceType {
    use crate::cloud::aws::instance_types::{NodeClassSettings, Overheads};
    let mut info = crate::cloud::aws::instance_types::tests::m5_large();
    info.name = name.into();
    f(&mut info);
    let settings = NodeClassSettings::of(&EC2NodeClass::test("default")).expect("settings");
    let o = Overheads {
        vm_memory_overhead: 0.075,
        reserved_enis: 0,
    };
    let offer = |ct: &str, price: f64| crate::model::Offering {
        zone: "us-east-1a".into(),
        capacity_type: ct.into(),
        price,
        available: true,
        reservations: Vec::new(),
    };
    crate::cloud::aws::instance_types::instance_type(
        &info,
        &settings,
        &o,
        "us-east-1",
        vec![offer("on-demand", od), offer("spot", spot)],
    )
}

fn plan_types(claim: &NodeClaim, types: &[InstanceType]) -> Result<LaunchPlan, CloudError> {
    let class = EC2NodeClass::test("default");
    let a = access();
    // Images for generic and for GPU types.
    let mut r = resolution();
    r.amis.push(Ami {
        deprecated: None,
        id: "ami-gpu".into(),
        name: None,
        requirements: crate::cloud::select::variant_requirements("amd64", "nvidia"),
    });
    let none = BTreeSet::new();
    plan(
        claim,
        &PlanInput {
            cluster: ClusterInfo {
                name: "prod",
                access: &a,
            },
            class: &class,
            family: Family::Al2023,
            resolution: &r,
            types,
            unavailable: &none,
            unavailable_subnets: &BTreeSet::new(),
            spot_unavailable: false,
            reservations: &[],
            availability: no_reservations(),
            placement: None,
        },
    )
}

fn launched_types(p: &LaunchPlan) -> BTreeSet<String> {
    p.configs
        .iter()
        .flat_map(|(_, o)| o.iter().map(|o| o.instance_type.clone()))
        .collect()
}

#[test]
fn exotic_types_launch_only_when_nothing_generic_fits() {
    use crate::cloud::aws::instance_types::Gpus;
    let gpu = |i: &mut crate::cloud::aws::instance_types::TypeInfo| {
        i.gpus = Some(Gpus {
            name: "t4".into(),
            manufacturer: "nvidia".into(),
            count: 1,
            memory_mib: 16384,
        });
    };
    let mut types = vec![
        priced("m5.large", 0.096, 0.05, |_| {}),
        priced("m5.metal", 0.05, 0.03, |_| {}),
        priced("g4dn.xlarge", 0.04, 0.02, gpu),
    ];
    // Metal and GPU types are cheaper, but a generic type fits.
    let claim = claim_allowing(&["on-demand"]);
    let p = plan_types(&claim, &types).expect("plans");
    assert_eq!(launched_types(&p), BTreeSet::from(["m5.large".to_string()]));
    // Only exotic ones fit: they launch.
    types.remove(0);
    let p = plan_types(&claim, &types).expect("plans");
    assert_eq!(
        launched_types(&p),
        BTreeSet::from(["g4dn.xlarge".to_string(), "m5.metal".to_string()])
    );
}

#[test]
fn spot_pricier_than_on_demand_is_not_launched() {
    let types = vec![
        priced("c5.large", 0.085, 0.2, |_| {}),
        priced("m5.large", 0.096, 0.3, |_| {}),
    ];
    // Every spot offering costs more than the cheapest on-demand one.
    let p = plan_types(&claim_allowing(&["spot", "on-demand"]), &types).expect("plans");
    assert_eq!(p.capacity_type, "on-demand");
    // A spot offering cheaper than that stays, the pricier one goes.
    let types = vec![
        priced("c5.large", 0.085, 0.2, |_| {}),
        priced("m5.large", 0.096, 0.04, |_| {}),
    ];
    let p = plan_types(&claim_allowing(&["spot", "on-demand"]), &types).expect("plans");
    assert_eq!(p.capacity_type, "spot");
    assert_eq!(launched_types(&p), BTreeSet::from(["m5.large".to_string()]));
    // Spot only: nothing to compare with.
    let p = plan_types(&claim_allowing(&["spot"]), &types).expect("plans");
    assert_eq!(launched_types(&p).len(), 2);
}

#[test]
fn truncation_keeps_the_60_cheapest_types_and_honours_min_values() {
    // 70 types in 7 families, the cheapest ten all of family f0.
    let types: Vec<InstanceType> = (0..70)
        .map(|i| {
            let family = if i < 10 { 0 } else { i % 7 };
            priced(
                &format!("f{family}.x{i}"),
                0.01 + i as f64 * 0.001,
                1.0,
                |_| {},
            )
        })
        .collect();
    let claim = claim_allowing(&["on-demand"]);
    let p = plan_types(&claim, &types).expect("plans");
    let launched = launched_types(&p);
    assert_eq!(launched.len(), MAX_INSTANCE_TYPES);
    assert!(!launched.contains("f3.x66"), "the dearest are cut");
    // minValues on the family: met by the 60 cheapest...
    let mut with_min = claim.clone();
    let mut req = crate::api::NodeSelectorRequirementWithMinValues::new(
        "karpenter.k8s.aws/instance-family",
        crate::api::Operator::Exists,
        &[] as &[&str],
    );
    req.min_values = Some(7);
    with_min.spec.requirements.push(req.clone());
    assert!(plan_types(&with_min, &types).is_ok());
    // ...or not: the claim cannot launch (Karpenter's insufficient
    // capacity), rather than launch with fewer.
    let few: Vec<InstanceType> = types
        .iter()
        .filter(|t| t.name.starts_with("f0.") || t.name == "f6.x69")
        .cloned()
        .chain((0..60).map(|i| priced(&format!("f0.y{i}"), 0.001, 1.0, |_| {})))
        .collect();
    req.min_values = Some(2);
    let mut two = claim.clone();
    two.spec.requirements.push(req);
    assert_eq!(
        plan_types(&two, &few),
        Err(CloudError::InsufficientCapacity {
            offerings: Vec::new()
        })
    );
}

#[test]
fn zone_ids_and_dedicated_tenancy_are_honoured() {
    let types = plan_input_types();
    let class = EC2NodeClass::test("default");
    let a = access();
    let mut r = resolution();
    r.subnets[0].zone_id = Some("use1-az1".into());
    r.subnets[1].zone_id = Some("use1-az2".into());
    let none = BTreeSet::new();
    let input = PlanInput {
        cluster: ClusterInfo {
            name: "prod",
            access: &a,
        },
        class: &class,
        family: Family::Al2023,
        resolution: &r,
        types: &types,
        unavailable: &none,
        unavailable_subnets: &BTreeSet::new(),
        spot_unavailable: false,
        reservations: &[],
        availability: no_reservations(),
        placement: None,
    };
    let mut c = claim_allowing(&["on-demand"]);
    c.spec
        .requirements
        .push(crate::api::NodeSelectorRequirementWithMinValues::new(
            LABEL_ZONE_ID,
            crate::api::Operator::In,
            &["use1-az2"],
        ));
    let p = plan(&c, &input).expect("plans");
    assert!(
        p.configs[0].1.iter().all(|o| o.zone == "us-east-1b"),
        "{:?}",
        p.configs
    );
    assert_eq!(p.tenancy, "default");
    assert_eq!(p.configs[0].0.tenancy, None);
    assert!(p.configs[0].0.request_data().placement().is_none());
    // Only dedicated allowed: the template places instances on
    // dedicated hardware.
    c.spec
        .requirements
        .push(crate::api::NodeSelectorRequirementWithMinValues::new(
            LABEL_TENANCY,
            crate::api::Operator::In,
            &["dedicated"],
        ));
    let p = plan(&c, &input).expect("plans");
    assert_eq!(p.tenancy, "dedicated");
    assert_eq!(
        p.configs[0]
            .0
            .request_data()
            .placement()
            .and_then(|x| x.tenancy())
            .map(|t| t.as_str()),
        Some("dedicated")
    );
    // Types offer both tenancies, as in Karpenter.
    assert!(
        types[0]
            .requirements
            .get(LABEL_TENANCY)
            .is_some_and(|r| r.has("default") && r.has("dedicated"))
    );
}

#[test]
fn types_with_other_max_pods_get_their_own_template() {
    let mut types = plan_input_types();
    // m5.large's node has 110 pods (a different kubelet maxPods).
    types[0].capacity.set(PODS, 110);
    let class = EC2NodeClass::test("default");
    let a = access();
    let r = resolution();
    let none = BTreeSet::new();
    let p = plan(
        &claim_allowing(&["on-demand"]),
        &PlanInput {
            cluster: ClusterInfo {
                name: "prod",
                access: &a,
            },
            class: &class,
            family: Family::Al2023,
            resolution: &r,
            types: &types,
            unavailable: &none,
            unavailable_subnets: &BTreeSet::new(),
            spot_unavailable: false,
            reservations: &[],
            availability: no_reservations(),
            placement: None,
        },
    )
    .expect("plans");
    assert_eq!(p.configs.len(), 2);
    let pods_of = |t: &TemplateSpec| -> Value {
        let parts = parse_mime(&t.user_data).expect("MIME");
        let config: Value = serde_json::from_str(&parts[0].body).expect("JSON");
        config["spec"]["kubelet"]["config"]["maxPods"].clone()
    };
    for (t, overrides) in &p.configs {
        let want = if overrides[0].instance_type == "m5.large" {
            110
        } else {
            29
        };
        assert_eq!(pods_of(t), json!(want), "{overrides:?}");
        assert!(
            overrides
                .iter()
                .all(|o| o.instance_type == overrides[0].instance_type)
        );
    }
    assert_ne!(p.configs[0].0.name("prod"), p.configs[1].0.name("prod"));
}

fn plan_with(claim: &NodeClaim, types: &[InstanceType], a: &ClusterAccess) -> LaunchPlan {
    let class = EC2NodeClass::test("default");
    let r = resolution();
    let none = BTreeSet::new();
    plan(
        claim,
        &PlanInput {
            cluster: ClusterInfo {
                name: "prod",
                access: a,
            },
            class: &class,
            family: Family::Al2023,
            resolution: &r,
            types,
            unavailable: &none,
            unavailable_subnets: &BTreeSet::new(),
            spot_unavailable: false,
            reservations: &[],
            availability: no_reservations(),
            placement: None,
        },
    )
    .expect("plans")
}

/// One interface CreateLaunchTemplate is asked for: (network card,
/// device, type, primary IPv6).
type Interface = (Option<i32>, Option<i32>, Option<String>, bool);

fn interfaces(t: &TemplateSpec) -> Vec<Interface> {
    t.request_data()
        .network_interfaces()
        .iter()
        .map(|i| {
            assert!(!i.groups().is_empty(), "the interface carries the groups");
            (
                i.network_card_index(),
                i.device_index(),
                i.interface_type().map(str::to_string),
                i.primary_ipv6() == Some(true),
            )
        })
        .collect()
}

#[test]
fn efa_interfaces_are_attached_only_when_the_claim_requests_efa() {
    let mut types = plan_input_types();
    // c5.large stands in for an EFA type with two network cards.
    types[1].capacity.set(EFA, 2);
    types[1].allocatable.set(EFA, 2);
    let a = access();
    let mut efa_claim = claim_allowing(&["on-demand"]);
    efa_claim.spec.resources = Some(crate::api::nodeclaim::NodeClaimResources {
        requests: Some(BTreeMap::from([(
            EFA.to_string(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
        )])),
    });
    let p = plan_with(&efa_claim, &types, &a);
    // Only the EFA type fits; its template attaches one EFA per card.
    assert_eq!(launched_types(&p), BTreeSet::from(["c5.large".to_string()]));
    let (t, _) = &p.configs[0];
    assert_eq!(t.efa_interfaces, 2);
    assert_eq!(
        interfaces(t),
        vec![
            (Some(0), Some(0), Some("efa".to_string()), false),
            (Some(1), Some(1), Some("efa".to_string()), false),
        ]
    );
    assert!(t.request_data().security_group_ids().is_empty());

    // Without the request, the EFA type launches with a plain
    // interface, and its template is the one it always had.
    let plain = plan_with(&claim_allowing(&["on-demand"]), &types, &a);
    for (t, _) in &plain.configs {
        assert_eq!(t.efa_interfaces, 0);
        assert!(t.request_data().network_interfaces().is_empty());
        assert!(!t.request_data().security_group_ids().is_empty());
        assert!(
            !serde_json::to_string(t)
                .expect("json")
                .contains("\"efa_interfaces\"")
        );
    }
    assert!(launched_types(&plain).contains("c5.large"));
}

#[test]
fn ipv6_clusters_get_a_primary_ipv6_address_and_their_dns() {
    let a = ClusterAccess {
        service_cidr: Some("fd00:ab12:cd34::/108".into()),
        ..access()
    };
    assert!(a.ipv6());
    let cluster = ClusterInfo {
        name: "prod",
        access: &a,
    };
    assert_eq!(cluster.dns_ip().as_deref(), Some("fd00:ab12:cd34::a"));
    let v4 = access();
    let with_dns = ClusterAccess {
        dns_ip: Some("172.20.0.10".into()),
        ..v4.clone()
    };
    assert_eq!(
        ClusterInfo {
            name: "prod",
            access: &v4
        }
        .dns_ip()
        .as_deref(),
        Some("10.100.0.10")
    );
    // The kube-dns Service's address wins over the CIDR's .10.
    assert_eq!(
        ClusterInfo {
            name: "prod",
            access: &with_dns
        }
        .dns_ip()
        .as_deref(),
        Some("172.20.0.10")
    );
    let p = plan_with(&claim_allowing(&["on-demand"]), &plan_input_types(), &a);
    for (t, _) in &p.configs {
        assert!(t.ipv6);
        assert_eq!(interfaces(t), vec![(None, Some(0), None, true)]);
    }
    // AL2 is told its IP family.
    let class = EC2NodeClass::test("default");
    let al2 =
        user_data(Family::Al2, &class, cluster, &Registration::default(), 29).expect("user data");
    assert!(
        al2.contains("--ip-family ipv6 --dns-cluster-ip 'fd00:ab12:cd34::a'"),
        "{al2}"
    );
    let al2_v4 = user_data(
        Family::Al2,
        &class,
        ClusterInfo {
            name: "prod",
            access: &v4,
        },
        &Registration::default(),
        29,
    )
    .expect("user data");
    assert!(!al2_v4.contains("--ip-family"), "{al2_v4}");
}

#[test]
fn zonal_subnets_replace_the_plans_and_zone_pods_take_the_fewest() {
    let mut p = plan_with(
        &claim_allowing(&["on-demand"]),
        &plan_input_types(),
        &access(),
    );
    let pods = p.zone_pods(|t| if t == "c5.large" { 8 } else { 29 });
    assert_eq!(
        pods,
        BTreeMap::from([("us-east-1a".to_string(), 8), ("us-east-1b".to_string(), 8)])
    );
    p.use_subnets(&BTreeMap::from([(
        "us-east-1b".to_string(),
        "subnet-other".to_string(),
    )]));
    for o in p.configs.iter().flat_map(|(_, o)| o) {
        if o.zone == "us-east-1b" {
            assert_eq!(o.subnet_id, "subnet-other");
        } else {
            assert_ne!(o.subnet_id, "subnet-other");
        }
    }
}

#[test]
fn fleet_answers_map_to_instances_refused_offerings_and_denials() {
    use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
    use aws_sdk_ec2::types::{
        CreateFleetError, CreateFleetInstance, FleetLaunchTemplateOverrides, InstanceLifecycle,
        InstanceType as Ty, LaunchTemplateAndOverridesResponse,
    };
    let overrides = |it: Ty, subnet: &str| {
        LaunchTemplateAndOverridesResponse::builder()
            .overrides(
                FleetLaunchTemplateOverrides::builder()
                    .instance_type(it)
                    .subnet_id(subnet)
                    .build(),
            )
            .build()
    };
    let types = plan_input_types();
    let class = EC2NodeClass::test("default");
    let a = access();
    let r = resolution();
    let none = BTreeSet::new();
    let plan = plan(
        &claim_allowing(&["on-demand"]),
        &PlanInput {
            cluster: ClusterInfo {
                name: "prod",
                access: &a,
            },
            class: &class,
            family: Family::Al2023,
            resolution: &r,
            types: &types,
            unavailable: &none,
            unavailable_subnets: &BTreeSet::new(),
            spot_unavailable: false,
            reservations: &[],
            availability: no_reservations(),
            placement: None,
        },
    )
    .expect("plans");
    let out = CreateFleetOutput::builder()
        .instances(
            CreateFleetInstance::builder()
                .instance_ids("i-1")
                .instance_type(Ty::M5Large)
                .lifecycle(InstanceLifecycle::OnDemand)
                .launch_template_and_overrides(overrides(Ty::M5Large, "subnet-b"))
                .build(),
        )
        .errors(
            CreateFleetError::builder()
                .error_code("InsufficientInstanceCapacity")
                .lifecycle(InstanceLifecycle::OnDemand)
                .launch_template_and_overrides(overrides(Ty::C5Large, "subnet-a"))
                .build(),
        )
        .errors(
            CreateFleetError::builder()
                .error_code("UnauthorizedOperation")
                .error_message("not authorized to perform iam:PassRole")
                .build(),
        )
        .build();
    let o = outcome(&out, &plan);
    assert_eq!(
        o.instances,
        [FleetInstance {
            id: "i-1".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1b".into(),
            subnet_id: Some("subnet-b".into()),
            capacity_type: "on-demand".into(),
        }]
    );
    assert_eq!(
        o.refused,
        [OfferingKey {
            instance_type: "c5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: "on-demand".into(),
        }]
    );
    assert_eq!(
        o.denied.as_deref(),
        Some("UnauthorizedOperation: not authorized to perform iam:PassRole")
    );
    assert!(!o.template_missing);
}

/// The plan types with reserved offerings in us-east-1a for m5.large
/// and c5.large, and reservations for them: an ordinary one for
/// c5.large, a capacity block for m5.large.
fn reserved_fixture() -> (Vec<InstanceType>, Vec<CapacityReservation>) {
    use crate::api::ec2nodeclass::{InstanceMatchCriteria, ReservationState};
    let mut types = plan_input_types();
    for it in &mut types {
        if it.name != "m6g.large" {
            let od = it.offerings[0].price;
            it.offerings.push(crate::model::Offering {
                zone: "us-east-1a".into(),
                capacity_type: "reserved".into(),
                price: od / reservations::PRICE_DIVISOR,
                available: true,
                reservations: Vec::new(),
            });
            it.requirements.0.insert(
                CAPACITY_TYPE.to_string(),
                crate::model::Requirement::in_values(["on-demand", "spot", "reserved"]),
            );
        }
    }
    let cr = |id: &str, it: &str, block: bool| CapacityReservation {
        availability_zone: "us-east-1a".into(),
        end_time: None,
        id: id.into(),
        instance_match_criteria: InstanceMatchCriteria::Targeted,
        instance_type: it.into(),
        interruptible: Some(false),
        owner_id: "012345678901".into(),
        reservation_type: Some(if block {
            ReservationType::CapacityBlock
        } else {
            ReservationType::Default
        }),
        state: Some(ReservationState::Active),
    };
    (
        types,
        vec![
            cr("cr-c5", "c5.large", false),
            cr("cr-m5", "m5.large", true),
        ],
    )
}

fn availability(counts: &[(&str, i64)]) -> Availability {
    let mut a = Availability::default();
    a.sync(
        &counts
            .iter()
            .map(|(id, n)| reservations::Facts {
                id: id.to_string(),
                instance_type: String::new(),
                zone: String::new(),
                owner_id: String::new(),
                instance_match_criteria: "targeted".into(),
                reservation_type: None,
                end: None,
                interruptible: false,
                available: *n,
            })
            .collect::<Vec<_>>(),
    );
    a
}

#[test]
fn a_claim_allowing_reserved_launches_into_a_reservation_first() {
    let (types, held) = reserved_fixture();
    let class = EC2NodeClass::test("default");
    let a = access();
    let r = resolution();
    let none = BTreeSet::new();
    let no_subnets = BTreeSet::new();
    let go = |claim: &NodeClaim, avail: &Availability| {
        plan(
            claim,
            &PlanInput {
                cluster: ClusterInfo {
                    name: "prod",
                    access: &a,
                },
                class: &class,
                family: Family::Al2023,
                resolution: &r,
                types: &types,
                unavailable: &none,
                unavailable_subnets: &no_subnets,
                spot_unavailable: false,
                reservations: &held,
                availability: avail,
                placement: None,
            },
        )
    };
    let both = availability(&[("cr-c5", 2), ("cr-m5", 1)]);
    // Reserved before spot and on-demand; of the kind of the cheapest
    // reserved offering (the ordinary reservation's).
    let p = go(&claim_allowing(&["reserved", "spot", "on-demand"]), &both).expect("plans");
    assert_eq!(p.capacity_type, "reserved");
    assert_eq!(p.configs.len(), 1);
    let (template, overrides) = &p.configs[0];
    assert_eq!(
        template.capacity_reservation,
        Some(TemplateReservation {
            id: "cr-c5".into(),
            capacity_block: false,
            interruptible: false,
        })
    );
    assert_eq!(overrides.len(), 1);
    assert_eq!(overrides[0].instance_type, "c5.large");
    assert_eq!(overrides[0].zone, "us-east-1a");
    assert_eq!(overrides[0].reservation.as_deref(), Some("cr-c5"));
    assert_eq!(p.reservation_of("c5.large", "us-east-1a"), Some("cr-c5"));
    // The template asks for that reservation alone.
    let data = template.request_data();
    let spec = data.capacity_reservation_specification().expect("spec");
    assert_eq!(
        spec.capacity_reservation_preference().map(|p| p.as_str()),
        Some("capacity-reservations-only")
    );
    assert_eq!(
        spec.capacity_reservation_target()
            .and_then(|t| t.capacity_reservation_id()),
        Some("cr-c5")
    );
    assert!(data.instance_market_options().is_none());

    // With the ordinary reservation used up, the capacity block (one
    // offering, its own market).
    let block_only = availability(&[("cr-c5", 0), ("cr-m5", 1)]);
    let p = go(&claim_allowing(&["reserved", "on-demand"]), &block_only).expect("plans");
    assert_eq!(p.capacity_type, "reserved");
    let kind = p.reservation_kind().expect("a reservation");
    assert!(kind.capacity_block);
    let data = p.configs[0].0.request_data();
    assert_eq!(
        data.instance_market_options()
            .and_then(|m| m.market_type())
            .map(|m| m.as_str()),
        Some("capacity-block")
    );

    // Nothing left: on demand, and its templates use no reservation.
    let empty = availability(&[("cr-m5", 0), ("cr-c5", 0)]);
    let p = go(&claim_allowing(&["reserved", "on-demand"]), &empty).expect("plans");
    assert_eq!(p.capacity_type, "on-demand");
    assert!(p.reservations().is_empty());
    let data = p.configs[0].0.request_data();
    let spec = data.capacity_reservation_specification().expect("spec");
    assert_eq!(
        spec.capacity_reservation_preference().map(|p| p.as_str()),
        Some("none")
    );
    assert!(spec.capacity_reservation_target().is_none());
    // A claim that allows only reserved is then out of capacity, naming
    // the reserved offerings.
    let err = go(&claim_allowing(&["reserved"]), &empty).unwrap_err();
    let CloudError::InsufficientCapacity { offerings } = err else {
        panic!("expected insufficient capacity, got {err}");
    };
    assert!(
        offerings
            .iter()
            .all(|o| o.capacity_type == "reserved" && o.zone == "us-east-1a"),
        "{offerings:?}"
    );
    assert_eq!(offerings.len(), 2);

    // A requirement on the reservation id picks it, and keeps the claim
    // off offerings outside reservations.
    let mut pinned = claim_allowing(&["reserved", "on-demand"]);
    pinned
        .spec
        .requirements
        .push(crate::api::NodeSelectorRequirementWithMinValues::new(
            LABEL_RESERVATION_ID,
            crate::api::Operator::In,
            &["cr-m5"],
        ));
    let p = go(&pinned, &both).expect("plans");
    assert_eq!(p.reservations(), BTreeSet::from(["cr-m5"]));
    assert!(matches!(
        go(&pinned, &availability(&[("cr-c5", 2), ("cr-m5", 0)])),
        Err(CloudError::InsufficientCapacity { .. })
    ));
}

#[test]
fn a_reserved_launch_out_of_room_reports_its_reservation() {
    use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
    use aws_sdk_ec2::types::{
        CreateFleetError, FleetLaunchTemplateOverrides, InstanceLifecycle, InstanceType as Ty,
        LaunchTemplateAndOverridesResponse,
    };
    let (types, held) = reserved_fixture();
    let class = EC2NodeClass::test("default");
    let a = access();
    let r = resolution();
    let avail = availability(&[("cr-c5", 1)]);
    let p = plan(
        &claim_allowing(&["reserved", "on-demand"]),
        &PlanInput {
            cluster: ClusterInfo {
                name: "prod",
                access: &a,
            },
            class: &class,
            family: Family::Al2023,
            resolution: &r,
            types: &types,
            unavailable: &BTreeSet::new(),
            unavailable_subnets: &BTreeSet::new(),
            spot_unavailable: false,
            reservations: &held,
            availability: &avail,
            placement: None,
        },
    )
    .expect("plans");
    let out = CreateFleetOutput::builder()
        .errors(
            CreateFleetError::builder()
                .error_code(reservations::RESERVATION_CAPACITY_EXCEEDED)
                .lifecycle(InstanceLifecycle::OnDemand)
                .launch_template_and_overrides(
                    LaunchTemplateAndOverridesResponse::builder()
                        .overrides(
                            FleetLaunchTemplateOverrides::builder()
                                .instance_type(Ty::C5Large)
                                .subnet_id("subnet-a")
                                .availability_zone("us-east-1a")
                                .build(),
                        )
                        .build(),
                )
                .build(),
        )
        .build();
    let o = outcome(&out, &p);
    assert!(o.instances.is_empty());
    assert_eq!(o.exhausted_reservations, ["cr-c5"]);
    assert_eq!(
        o.refused,
        [OfferingKey {
            instance_type: "c5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: "reserved".into(),
        }]
    );
}
