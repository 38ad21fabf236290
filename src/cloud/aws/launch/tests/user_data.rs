use super::*;

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
