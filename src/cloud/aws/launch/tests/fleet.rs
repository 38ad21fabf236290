use super::*;

#[test]
fn batches_fit_their_names_in_a_tag_value() {
    let names: Vec<String> = (0..40).map(|i| format!("default-{i:05}")).collect();
    let cut = batches(&names, 256);
    assert_eq!(cut.iter().map(|b| b.len()).sum::<usize>(), 40);
    assert!(cut.iter().all(|b| b.join(",").len() <= 256));
    // 13 characters and a comma each: 18 fit in 256.
    assert_eq!(cut[0].len(), 18);
    let long = vec!["x".repeat(300), "y".into()];
    assert_eq!(batches(&long, 256).len(), 2);
    assert!(batches(&[], 256).is_empty());
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
