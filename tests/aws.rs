//! The AWS provider against moto (a real EC2/SSM emulator, see
//! `tests/moto.rs`), with the faults moto never produces injected by a
//! proxy (`tests/aws_proxy.rs`); and the IAM policy's coverage of the code.
//!
//! moto's gaps, and how the tests stand in for them:
//! - no Pricing API: prices come from `tests/fixtures/aws/prices.json`, and
//!   GetProducts answers from recorded pages served by the proxy;
//! - no `/aws/...` SSM parameters: AMI aliases are seeded under a test
//!   root (`--ssm-parameter-root`);
//! - CreateFleet never fails for capacity, nor does anything throttle or
//!   deny: the proxy does;
//! - instances launched by CreateFleet carry no security groups of the
//!   launch template (on-demand) or the VPC's default group (spot), so the
//!   tests launch on-demand and check drift by image.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use dovetail::api::ec2nodeclass::{ConnectionTracking, EC2NodeClassStatus};
use dovetail::api::{EC2NodeClass, NodeClaim, NodePool};
use dovetail::clock::{Clock, ManualClock, SystemClock};
use dovetail::cloud::aws::{AwsConfig, AwsProvider, ClusterAccess, RetrySettings};
use dovetail::cloud::{CloudError, CloudProvider, InstanceState};
use dovetail::cluster::Cluster;
use dovetail::controller::{BATCH_IDLE, Controller, Settings};
use dovetail::drift::DriftReason;
use dovetail::world::MemoryCluster;

use crate::aws_proxy;
use crate::moto;
use crate::support::root;

pub(crate) const K8S: &str = "1.34";

pub(crate) fn from_yaml<T: serde::de::DeserializeOwned>(s: &str) -> T {
    serde_saphyr::from_str(s).expect("valid test YAML")
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A VPC of one test in moto: subnets in two zones and a security group
/// tagged for the test's cluster, and two images published in turn under
/// the test's SSM root as the AL2023 alias.
pub(crate) struct Env {
    pub(crate) region: String,
    pub(crate) cluster: String,
    pub(crate) ec2: aws_sdk_ec2::Client,
    ssm: aws_sdk_ssm::Client,
    subnets: Vec<(String, String)>,
    security_group: String,
    pub(crate) images: [String; 2],
    pub(crate) ssm_root: String,
    /// The Kubernetes version of the image parameters' paths.
    pub(crate) kubernetes_version: String,
}

impl Env {
    pub(crate) async fn new(endpoint: &str, region: &str, cluster: &str) -> Env {
        Self::for_version(endpoint, region, cluster, K8S).await
    }

    /// An environment whose images are published for Kubernetes `version`.
    pub(crate) async fn for_version(
        endpoint: &str,
        region: &str,
        cluster: &str,
        version: &str,
    ) -> Env {
        let sdk = moto::sdk_config(endpoint, region).await;
        let ec2 = aws_sdk_ec2::Client::new(&sdk);
        let ssm = aws_sdk_ssm::Client::new(&sdk);
        // The node role the test's node classes name (dovetail makes its
        // instance profile). IAM is global: another region's test of the
        // same cluster may have made it.
        let made = aws_sdk_iam::Client::new(&sdk)
            .create_role()
            .role_name(format!("KarpenterNodeRole-{cluster}"))
            .assume_role_policy_document(
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
            )
            .send()
            .await;
        if let Err(e) = made {
            use aws_sdk_iam::error::ProvideErrorMetadata;
            assert_eq!(e.code(), Some("EntityAlreadyExists"), "CreateRole: {e:?}");
        }
        let discovery = |r: ResourceType| {
            TagSpecification::builder()
                .resource_type(r)
                .tags(
                    Tag::builder()
                        .key("karpenter.sh/discovery")
                        .value(cluster)
                        .build(),
                )
                .build()
        };
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.0.0.0/16")
            .send()
            .await
            .expect("CreateVpc")
            .vpc()
            .and_then(|v| v.vpc_id().map(str::to_string))
            .expect("a VPC id");
        let mut subnets = Vec::new();
        for (i, suffix) in ["a", "b"].iter().enumerate() {
            let zone = format!("{region}{suffix}");
            let s = ec2
                .create_subnet()
                .vpc_id(&vpc)
                .cidr_block(format!("10.0.{i}.0/24"))
                .availability_zone(&zone)
                .tag_specifications(discovery(ResourceType::Subnet))
                .send()
                .await
                .expect("CreateSubnet");
            subnets.push((
                s.subnet()
                    .and_then(|s| s.subnet_id())
                    .expect("id")
                    .to_string(),
                zone,
            ));
        }
        let security_group = ec2
            .create_security_group()
            .group_name(format!("{cluster}-nodes"))
            .description("nodes")
            .vpc_id(&vpc)
            .tag_specifications(discovery(ResourceType::SecurityGroup))
            .send()
            .await
            .expect("CreateSecurityGroup")
            .group_id()
            .expect("id")
            .to_string();
        let amis = ec2
            .describe_images()
            .owners("amazon")
            .filters(
                Filter::builder()
                    .name("architecture")
                    .values("x86_64")
                    .build(),
            )
            .send()
            .await
            .expect("DescribeImages");
        let mut ids: Vec<String> = amis
            .images()
            .iter()
            .filter(|i| i.platform().is_none())
            .filter_map(|i| i.image_id().map(str::to_string))
            .collect();
        ids.sort();
        assert!(ids.len() >= 2, "moto has Linux images in {region}");
        let env = Env {
            region: region.to_string(),
            cluster: cluster.to_string(),
            ec2,
            ssm,
            subnets,
            security_group,
            images: [ids[0].clone(), ids[1].clone()],
            ssm_root: format!("/dovetail-test/{cluster}/service"),
            kubernetes_version: version.to_string(),
        };
        env.publish(0).await;
        env
    }

    /// Publishes image 0 or 1 as the AL2023 standard x86_64 image.
    pub(crate) async fn publish(&self, which: usize) {
        self.ssm
            .put_parameter()
            .name(format!(
                "{}/eks/optimized-ami/{}/amazon-linux-2023/x86_64/standard/recommended/image_id",
                self.ssm_root, self.kubernetes_version
            ))
            .value(&self.images[which])
            .r#type(aws_sdk_ssm::types::ParameterType::String)
            .overwrite(true)
            .send()
            .await
            .expect("PutParameter");
    }

    /// Writes an SSM parameter under the test's root.
    async fn put_parameter(&self, path: &str, value: &str) {
        self.ssm
            .put_parameter()
            .name(format!("{}{path}", self.ssm_root))
            .value(value)
            .r#type(aws_sdk_ssm::types::ParameterType::String)
            .overwrite(true)
            .send()
            .await
            .expect("PutParameter");
    }

    pub(crate) fn config(&self) -> AwsConfig {
        let mut c = AwsConfig::new(&self.cluster);
        c.kubernetes_version = Some(K8S.to_string());
        c.ssm_parameter_root = self.ssm_root.clone();
        c.pricing_file = Some(root().join("tests/fixtures/aws/prices.json"));
        c.isolated_vpc = true;
        c.cluster = ClusterAccess {
            endpoint: Some("https://example.eks.amazonaws.com".to_string()),
            ca_bundle: Some("Q0E=".to_string()),
            service_cidr: Some("10.100.0.0/16".to_string()),
            dns_ip: None,
        };
        c.retry = RetrySettings {
            max_attempts: 4,
            base: Duration::from_millis(2),
            cap: Duration::from_millis(20),
            ..RetrySettings::default()
        };
        c
    }

    pub(crate) async fn provider(&self, endpoint: &str, config: AwsConfig) -> AwsProvider {
        let sdk = moto::sdk_config(endpoint, &self.region).await;
        AwsProvider::from_sdk_config(config, &sdk, Arc::new(SystemClock)).expect("provider")
    }

    fn nodeclass(&self) -> EC2NodeClass {
        let mut c: EC2NodeClass = from_yaml(&format!(
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\n\
             spec:\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n  role: KarpenterNodeRole-{0}\n  \
             subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: {0}}}}}]\n  \
             securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: {0}}}}}]\n  \
             tags: {{team: platform}}\n",
            self.cluster
        ));
        c.apply_defaults();
        c
    }

    /// The node class with its status resolved by `aws`.
    pub(crate) async fn resolved(&self, aws: &AwsProvider) -> EC2NodeClass {
        let class = self.nodeclass();
        let r = aws.resolve_node_class(&class).await.expect("resolves");
        with_status(class, &r)
    }

    /// Tags of an instance, from EC2.
    pub(crate) async fn tags(&self, id: &str) -> BTreeMap<String, String> {
        let out = self
            .ec2
            .describe_instances()
            .instance_ids(id)
            .send()
            .await
            .expect("DescribeInstances");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .flat_map(|i| i.tags())
            .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
            .collect()
    }

    async fn launch_templates(&self) -> Vec<String> {
        let out = self
            .ec2
            .describe_launch_templates()
            .filters(
                Filter::builder()
                    .name(format!("tag:kubernetes.io/cluster/{}", self.cluster))
                    .values("owned")
                    .build(),
            )
            .send()
            .await
            .expect("DescribeLaunchTemplates");
        let mut names: Vec<String> = out
            .launch_templates()
            .iter()
            .filter(|t| !validation_template(t))
            .filter_map(|t| t.launch_template_name().map(str::to_string))
            .collect();
        names.sort();
        names
    }
}

/// Whether a launch template is the one validation made for its dry-runs
/// (a launch of no NodePool, as Karpenter's validation NodeClaim: tagged
/// `karpenter.sh/nodepool` empty), which no launch uses.
fn validation_template(t: &aws_sdk_ec2::types::LaunchTemplate) -> bool {
    t.tags()
        .iter()
        .any(|tag| tag.key() == Some("karpenter.sh/nodepool") && tag.value() == Some(""))
}

/// A NodeClaim of pool `default` for the node class `default`, allowing
/// the given instance types on demand.
pub(crate) fn claim(name: &str, types: &[&str]) -> NodeClaim {
    let types = types.join(", ");
    from_yaml(&format!(
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: {name}\n  labels: {{karpenter.sh/nodepool: default}}\n\
         spec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n  \
         requirements:\n  - {{key: node.kubernetes.io/instance-type, operator: In, values: [{types}]}}\n  \
         - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n  \
         resources: {{requests: {{cpu: 500m, memory: 1Gi}}}}\n"
    ))
}

fn with_status(
    mut class: EC2NodeClass,
    resolution: &dovetail::cloud::NodeClassResolution,
) -> EC2NodeClass {
    let mut status = EC2NodeClassStatus::default();
    resolution.apply_to(&mut status);
    class.status = Some(status);
    class
}

fn recorded(claim: &NodeClaim, provider_id: &str) -> NodeClaim {
    let mut c = claim.clone();
    c.status.get_or_insert_with(Default::default).provider_id = Some(provider_id.to_string());
    c
}

/// AMI terms by `name`, with and without `owner`, resolve as EC2 answers
/// them: the owner goes in DescribeImages' Owners (default `self` and
/// `amazon`), never in a filter EC2 does not have.
#[test]
fn ami_name_terms_resolve_with_and_without_an_owner() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let env = Env::new(&moto.endpoint(), "us-west-2", "names").await;
        let aws = env.provider(&moto.endpoint(), env.config()).await;
        let image = env
            .ec2
            .describe_images()
            .image_ids(&env.images[0])
            .send()
            .await
            .expect("DescribeImages");
        let name = image.images()[0].name().expect("a name").to_string();
        for owner in [None, Some("amazon")] {
            let mut class = env.nodeclass();
            class.spec.ami_selector_terms[0].alias = None;
            class.spec.ami_selector_terms[0].name = Some(name.clone());
            class.spec.ami_selector_terms[0].owner = owner.map(str::to_string);
            let r = aws.resolve_node_class(&class).await.expect("resolves");
            let ids: Vec<&str> = r.amis.iter().map(|a| a.id.as_str()).collect();
            assert!(
                ids.contains(&env.images[0].as_str()),
                "owner {owner:?}: {ids:?} {:?}",
                r.problems
            );
        }
        // An owner that has no such image selects nothing.
        let mut class = env.nodeclass();
        class.spec.ami_selector_terms[0].alias = None;
        class.spec.ami_selector_terms[0].name = Some(name);
        class.spec.ami_selector_terms[0].owner = Some("123456789012".into());
        let r = aws.resolve_node_class(&class).await.expect("resolves");
        assert!(r.amis.is_empty(), "{:?}", r.amis);
    });
}

/// EKS deprecates its AMIs about two years after release, and EC2 leaves
/// deprecated images another account owns out of DescribeImages unless
/// the request asks for them. Pinned aliases, `name` terms and `id` terms
/// on such an image still resolve, and the status says it is deprecated.
#[test]
fn a_deprecated_image_still_resolves_by_alias_name_and_id() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "eu-west-1", "deprecated").await;
        let old = env.images[0].clone();
        let name = env
            .ec2
            .describe_images()
            .image_ids(&old)
            .send()
            .await
            .expect("DescribeImages")
            .images()[0]
            .name()
            .expect("a name")
            .to_string();
        proxy
            .faults
            .lock()
            .unwrap()
            .deprecated_images
            .insert(old.clone());
        // EC2 as the proxy models it: a listing without the flag does not
        // show the image.
        let listed = env
            .ec2
            .describe_images()
            .owners("amazon")
            .filters(Filter::builder().name("name").values(&name).build())
            .send()
            .await
            .expect("DescribeImages");
        assert!(listed.images().is_empty(), "{:?}", listed.images());

        let ours = proxy.count("DescribeImages");
        let aws = env.provider(&proxy.endpoint(), env.config()).await;
        let alias = env.nodeclass();
        let mut by_name = env.nodeclass();
        by_name.spec.ami_selector_terms[0].alias = None;
        by_name.spec.ami_selector_terms[0].name = Some(name.clone());
        let mut by_id = env.nodeclass();
        by_id.spec.ami_selector_terms[0].alias = None;
        by_id.spec.ami_selector_terms[0].id = Some(old.clone());
        for (term, class) in [("alias", alias), ("name", by_name), ("id", by_id)] {
            let r = aws.resolve_node_class(&class).await.expect("resolves");
            let ami = r.amis.iter().find(|a| a.id == old);
            assert!(
                ami.is_some_and(|a| a.deprecated == Some(true)),
                "{term}: {:?} {:?}",
                r.amis,
                r.problems
            );
        }
        let bodies = &proxy.bodies("DescribeImages")[ours..];
        assert!(!bodies.is_empty());
        assert!(
            bodies.iter().all(|b| b.contains("IncludeDeprecated=true")),
            "{bodies:?}"
        );
    });
}

#[test]
fn a_node_class_resolves_launches_reuse_a_template_and_a_new_image_drifts_them() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let env = Env::new(&moto.endpoint(), "us-west-2", "resolve").await;
        let aws = env.provider(&moto.endpoint(), env.config()).await;

        // Resolution: both subnets, the group, the alias's image.
        let class = env.nodeclass();
        let r = aws.resolve_node_class(&class).await.expect("resolves");
        assert!(r.is_ready(), "{:?}", r.problems);
        let mut subnets: Vec<(String, String)> = r
            .subnets
            .iter()
            .map(|s| (s.id.clone(), s.zone.clone()))
            .collect();
        subnets.sort();
        let mut want = env.subnets.clone();
        want.sort();
        assert_eq!(subnets, want);
        assert_eq!(r.security_groups.len(), 1);
        assert_eq!(r.security_groups[0].id, env.security_group);
        assert_eq!(r.amis.len(), 1, "{:?}", r.amis);
        assert_eq!(r.amis[0].id, env.images[0]);
        // The role's instance profile, made for the class.
        let profile = r.instance_profile.clone().unwrap_or_default();
        assert!(profile.starts_with("resolve_"), "{profile}");
        // What is missing is named.
        let mut lost = class.clone();
        lost.spec.subnet_selector_terms[0].tags = Some(BTreeMap::from([(
            "karpenter.sh/discovery".into(),
            "nobody".into(),
        )]));
        lost.spec.ami_selector_terms[0].alias = Some("bottlerocket@latest".into());
        let r2 = aws.resolve_node_class(&lost).await.expect("resolves");
        assert!(!r2.is_ready());
        let failing = |r: &dovetail::cloud::NodeClassResolution, condition: &str, reason: &str| {
            r.problems
                .iter()
                .any(|p| p.condition.as_str() == condition && p.reason == reason)
        };
        assert!(
            failing(&r2, "SubnetsReady", "SubnetsNotFound"),
            "{:?}",
            r2.problems
        );
        assert!(
            failing(&r2, "AMIsReady", "AMINotFound"),
            "{:?}",
            r2.problems
        );
        assert!(
            failing(&r2, "ValidationSucceeded", "DependenciesNotReady"),
            "{:?}",
            r2.problems
        );
        // The status conditions: each dependent, and Ready naming the
        // failing ones.
        let conds = r2.conditions();
        let ready = conds.iter().find(|c| c.type_ == "Ready").expect("Ready");
        assert!(!ready.status);
        assert_eq!(ready.reason, "UnhealthyDependents");
        assert_eq!(
            ready.message,
            "AMIsReady=False, SubnetsReady=False, ValidationSucceeded=False"
        );
        assert!(
            conds
                .iter()
                .any(|c| c.type_ == "SecurityGroupsReady" && c.status),
            "{conds:?}"
        );

        // Nested virtualization, which m5.large lacks (moto's
        // DescribeInstanceTypes): no offering of it can launch from the class.
        let mut cpu = class.clone();
        cpu.spec.cpu_options = Some(from_yaml("nestedVirtualization: enabled"));
        let cpu = with_status(cpu, &r);
        assert!(matches!(
            aws.create(&claim("default-cpu", &["m5.large"]), &cpu, &BTreeSet::new())
                .await,
            Err(CloudError::InvalidRequest(_))
        ));

        // A launch: the cheapest allowed type (c5.large at $0.085 against
        // m5.large at $0.096), tagged, from a launch template.
        let class = with_status(class, &r);
        let a = claim("default-a", &["m5.large", "c5.large"]);
        let launched = aws
            .create(&a, &class, &BTreeSet::new())
            .await
            .expect("launches");
        assert!(launched.refused.is_empty());
        let i = &launched.instance;
        assert_eq!(i.instance_type, "c5.large");
        assert_eq!(i.capacity_type, "on-demand");
        assert_eq!(i.price, 0.085);
        assert_eq!(i.image_id.as_deref(), Some(env.images[0].as_str()));
        assert!(
            env.subnets
                .iter()
                .any(|(id, zone)| Some(id) == i.subnet_id.as_ref() && *zone == i.zone)
        );
        assert_eq!(i.provider_id, format!("aws:///{}/{}", i.zone, i.id));
        assert_eq!(i.labels["karpenter.k8s.aws/instance-family"], "c5");
        let tags = env.tags(&i.id).await;
        for (k, v) in [
            ("kubernetes.io/cluster/resolve", "owned"),
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.sh/nodeclaim", "default-a"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("eks:eks-cluster-name", "resolve"),
            ("team", "platform"),
        ] {
            assert_eq!(
                tags.get(k).map(String::as_str),
                Some(v),
                "tag {k}: {tags:?}"
            );
        }
        let templates = env.launch_templates().await;
        assert_eq!(templates.len(), 1, "{templates:?}");
        assert!(templates[0].starts_with("dovetail/resolve/"));

        // A second launch reuses the template.
        let b = claim("default-b", &["m5.large"]);
        let second = aws
            .create(&b, &class, &BTreeSet::new())
            .await
            .expect("launches")
            .instance;
        assert_eq!(second.instance_type, "m5.large");
        assert_eq!(env.launch_templates().await, templates);

        // get, list, and no drift while the alias names the same image.
        let listed = aws.list().await.expect("lists");
        let ids: BTreeSet<&str> = listed.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, BTreeSet::from([i.id.as_str(), second.id.as_str()]));
        assert_eq!(
            aws.get(&i.provider_id).await.expect("exists").state,
            InstanceState::Running
        );
        let a = recorded(&a, &i.provider_id);
        assert_eq!(
            aws.is_drifted(&a, &class).await.expect("checks"),
            Vec::<DriftReason>::new()
        );

        // A new image under the alias: the node class resolves to it, and
        // the running instance is drifted.
        env.publish(1).await;
        let r = aws.resolve_node_class(&class).await.expect("resolves");
        assert_eq!(r.amis[0].id, env.images[1]);
        let class = with_status(class, &r);
        assert_eq!(
            aws.is_drifted(&a, &class).await.expect("checks"),
            vec![DriftReason::Ami {
                image: env.images[0].clone()
            }]
        );

        // The old image's template is cleaned up; the next launch makes one
        // for the new image.
        let deleted = aws
            .cleanup_launch_templates(std::slice::from_ref(&class))
            .await
            .expect("cleans");
        // The launch's template and validation's, both of the old image.
        assert_eq!(deleted.len(), 2, "{deleted:?}");
        assert!(templates.iter().all(|t| deleted.contains(t)), "{deleted:?}");
        assert!(env.launch_templates().await.is_empty());
        let c = claim("default-c", &["m5.large"]);
        let third = aws
            .create(&c, &class, &BTreeSet::new())
            .await
            .expect("launches")
            .instance;
        assert_eq!(third.image_id.as_deref(), Some(env.images[1].as_str()));
        let now = env.launch_templates().await;
        assert_eq!(now.len(), 1);
        assert_ne!(now, templates);
        // A node class that is gone takes its templates with it
        // (validation's too).
        let gone = aws.cleanup_launch_templates(&[]).await.expect("cleans");
        assert_eq!(gone.len(), 2, "{gone:?}");
        assert!(gone.contains(&now[0]), "{gone:?}");

        // Delete: gone, then not found.
        aws.delete(&i.provider_id).await.expect("terminates");
        assert!(matches!(
            aws.delete(&i.provider_id).await,
            Err(CloudError::NotFound(_))
        ));
        assert!(matches!(
            aws.get(&i.provider_id).await,
            Err(CloudError::NotFound(_))
        ));
        let left: BTreeSet<String> = aws
            .list()
            .await
            .expect("lists")
            .into_iter()
            .map(|i| i.id.clone())
            .collect();
        assert_eq!(left, BTreeSet::from([second.id.clone(), third.id.clone()]));
        assert!(matches!(
            aws.get("aws:///us-west-2a/i-00000000000000000").await,
            Err(CloudError::NotFound(_))
        ));
    });
}

#[test]
fn garbage_collection_terminates_an_instance_no_node_claim_owns() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let env = Env::new(&moto.endpoint(), "us-west-2", "gc").await;
        let aws = Arc::new(env.provider(&moto.endpoint(), env.config()).await);
        let class = env.resolved(&aws).await;
        let owned = claim("owned", &["c5.large"]);
        let kept = aws
            .create(&owned, &class, &BTreeSet::new())
            .await
            .expect("launches")
            .instance;
        // A launch whose NodeClaim never recorded it (a crash in between).
        let orphan = aws
            .create(&claim("crashed", &["c5.large"]), &class, &BTreeSet::new())
            .await
            .expect("launches")
            .instance;

        let clock = Arc::new(ManualClock::new(SystemClock.now()));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let cluster = Arc::new(MemoryCluster::new(dyn_clock.clone()));
        cluster
            .create(recorded(&owned, &kept.provider_id))
            .expect("created");
        let mut controller = Controller::new(cluster, aws.clone(), dyn_clock, Settings::default());
        // Within the grace, nothing happens.
        controller.reconcile_garbage().await;
        assert_eq!(aws.list().await.expect("lists").len(), 2);
        clock.advance(Duration::from_secs(6 * 60)).expect("forward");
        controller.reconcile_garbage().await;
        let left: Vec<String> = aws
            .list()
            .await
            .expect("lists")
            .into_iter()
            .map(|i| i.id.clone())
            .collect();
        assert_eq!(left, std::slice::from_ref(&kept.id));
        assert!(matches!(
            aws.get(&orphan.provider_id).await,
            Err(CloudError::NotFound(_))
        ));
        let events = controller.drain_events();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].reason, "GarbageCollected");
    });
}

#[test]
fn identical_concurrent_launches_share_one_create_fleet() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-west-2", "batch").await;
        let aws = env.provider(&proxy.endpoint(), env.config()).await;
        let class = env.resolved(&aws).await;
        let claims: Vec<NodeClaim> = (0..3)
            .map(|n| claim(&format!("batch-{n}"), &["m5.large"]))
            .collect();
        let none = BTreeSet::new();
        let launched =
            futures::future::join_all(claims.iter().map(|c| aws.create(c, &class, &none))).await;
        let instances: Vec<_> = launched
            .into_iter()
            .map(|l| l.expect("launches").instance)
            .collect();
        let ids: BTreeSet<&str> = instances.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids.len(), 3, "three distinct instances");
        assert_eq!(
            proxy.count("CreateFleet"),
            1,
            "one CreateFleet for the three"
        );
        let body = &proxy.bodies("CreateFleet")[0];
        assert!(body.contains("TotalTargetCapacity=3"), "{body}");
        // The fleet is tagged too, as Karpenter tags it.
        assert!(body.contains("ResourceType=fleet"), "{body}");
        // Each instance carries its own NodeClaim's tag.
        for i in &instances {
            assert_eq!(
                env.tags(&i.id).await.get("karpenter.sh/nodeclaim"),
                Some(&i.nodeclaim)
            );
        }
        // The fleet's instances also name the whole batch, which is all a
        // replica that dies between the fleet and the tags leaves behind.
        let mut batch: Vec<String> = claims
            .iter()
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .collect();
        batch.sort();
        for i in &instances {
            let tags = env.tags(&i.id).await;
            let mut named: Vec<String> = tags["dovetail.dev/launch-batch"]
                .split(',')
                .map(str::to_string)
                .collect();
            named.sort();
            assert_eq!(named, batch);
        }
        // A lone launch is not batched with anything and tags at launch.
        aws.create(&claim("alone", &["m5.large"]), &class, &none)
            .await
            .expect("launches");
        assert_eq!(proxy.count("CreateFleet"), 2);
        assert_eq!(proxy.count("CreateTags"), 3);

        // The launching replica died after CreateFleet, before the tags and
        // the NodeClaims' status: the next one finds each claim's instance
        // among the batch's and records it instead of launching again.
        for i in &instances {
            env.ec2
                .delete_tags()
                .resources(&i.id)
                .tags(Tag::builder().key("karpenter.sh/nodeclaim").build())
                .send()
                .await
                .expect("DeleteTags");
        }
        let standby = Arc::new(env.provider(&proxy.endpoint(), env.config()).await);
        let (_, cluster, mut controller) = controller_for(
            &env,
            &standby,
            &class,
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      \
             nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
        )
        .await;
        for c in &claims {
            cluster.create(c.clone()).expect("created");
        }
        controller.reconcile_nodeclaims().await;
        let recorded: BTreeSet<String> = Cluster::list::<NodeClaim>(cluster.as_ref())
            .iter()
            .filter_map(|c| c.status.as_ref()?.provider_id.clone())
            .collect();
        let launched: BTreeSet<String> = instances.iter().map(|i| i.provider_id.clone()).collect();
        assert_eq!(
            recorded, launched,
            "each claim recorded one of the batch's instances"
        );
        assert_eq!(proxy.count("CreateFleet"), 2, "nothing launched again");
        let reasons: Vec<String> = controller
            .drain_events()
            .into_iter()
            .map(|e| e.reason)
            .collect();
        assert_eq!(
            reasons.iter().filter(|r| *r == "LaunchRecovered").count(),
            3,
            "{reasons:?}"
        );
    });
}

#[test]
fn insufficient_capacity_marks_offerings_unavailable_and_the_next_solve_picks_another() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-east-2", "ice").await;
        let aws = Arc::new(env.provider(&proxy.endpoint(), env.config()).await);
        let class = env.resolved(&aws).await;
        proxy.faults.lock().unwrap().no_capacity.insert("c5.large".to_string());

        // The provider: a claim that allows only c5.large fails with the
        // refused offerings...
        let only = claim("only-c5", &["c5.large"]);
        let err = aws.create(&only, &class, &BTreeSet::new()).await.unwrap_err();
        let CloudError::InsufficientCapacity { offerings } = err else {
            panic!("expected insufficient capacity, got {err}");
        };
        let zones: Vec<&str> = offerings.iter().map(|o| o.zone.as_str()).collect();
        assert_eq!(zones, ["us-east-2a", "us-east-2b"]);
        assert!(offerings.iter().all(|o| o.instance_type == "c5.large" && o.capacity_type == "on-demand"));
        // ...and with them known to be out, it does not even ask.
        let fleets = proxy.count("CreateFleet");
        let unavailable: BTreeSet<_> = offerings.into_iter().collect();
        assert!(matches!(
            aws.create(&only, &class, &unavailable).await,
            Err(CloudError::InsufficientCapacity { .. })
        ));
        assert_eq!(proxy.count("CreateFleet"), fleets);

        // The controller: the cheapest type (c5.large) is refused within the
        // fleet, marked unavailable, and the launch lands on m5.large.
        let clock = Arc::new(ManualClock::new(SystemClock.now()));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let cluster = Arc::new(MemoryCluster::new(dyn_clock.clone()));
        let stored = cluster.create(env.nodeclass()).expect("created");
        let mut with = (*stored).clone();
        with.status = class.status.clone();
        Cluster::replace_status(cluster.as_ref(), with).await.expect("status");
        let pool: NodePool = from_yaml(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      \
             nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n      \
             - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large, m5.large]}\n      \
             - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n",
        );
        cluster.create(pool).expect("created");
        let mut controller = Controller::new(cluster.clone(), aws.clone(), dyn_clock, Settings::default());
        let pending = |name: &str| -> k8s_openapi::api::core::v1::Pod {
            from_yaml(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n\
                 spec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: '1', memory: 1Gi}}}}}}]}}\n\
                 status: {{phase: Pending, conditions: [{{type: PodScheduled, status: 'False', reason: Unschedulable}}]}}\n"
            ))
        };
        cluster.create(pending("first")).expect("created");
        controller.reconcile_provisioning().await;
        clock.advance(BATCH_IDLE).expect("forward");
        controller.reconcile_provisioning().await;
        let claims = Cluster::list::<NodeClaim>(cluster.as_ref());
        assert_eq!(claims.len(), 1);
        controller.reconcile_nodeclaims().await;
        let claim1 = Cluster::list::<NodeClaim>(cluster.as_ref())[0].clone();
        let launched_type = claim1
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("node.kubernetes.io/instance-type"))
            .cloned();
        assert_eq!(launched_type.as_deref(), Some("m5.large"));
        // The NodeClaim records what was launched.
        let status = claim1.status.clone().unwrap_or_default();
        let provider_id = status.provider_id.unwrap_or_default();
        assert!(provider_id.starts_with("aws:///us-east-2"), "{provider_id}");
        assert_eq!(status.image_id.as_deref(), Some(env.images[0].as_str()));
        let labels = claim1.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
        assert!(labels["topology.kubernetes.io/zone"].starts_with("us-east-2"));
        let instance = aws.get(&provider_id).await.expect("the instance exists");
        assert_eq!(instance.nodeclaim, claim1.metadata.name.clone().unwrap_or_default());
        let now = clock.now();
        let marked: Vec<String> = controller
            .unavailable
            .active(now)
            .into_iter()
            .map(|o| format!("{}/{}", o.instance_type, o.zone))
            .collect();
        assert_eq!(marked, ["c5.large/us-east-2a", "c5.large/us-east-2b"]);
        let events = controller.drain_events();
        assert!(events.iter().any(|e| e.reason == "InsufficientCapacity"), "{events:?}");

        // The next solve knows: its claim's launch no longer offers c5.large
        // to the fleet at all.
        cluster.create(pending("second")).expect("created");
        clock.advance(Duration::from_secs(1)).expect("forward");
        controller.reconcile_provisioning().await;
        clock.advance(BATCH_IDLE).expect("forward");
        controller.reconcile_provisioning().await;
        assert_eq!(Cluster::list::<NodeClaim>(cluster.as_ref()).len(), 2);
        controller.reconcile_nodeclaims().await;
        let last = proxy.bodies("CreateFleet").pop().expect("a CreateFleet");
        assert!(!last.contains("c5.large"), "{last}");
        assert!(last.contains("m5.large"), "{last}");
        // Three minutes later c5.large is offered again.
        clock.advance(Duration::from_secs(181)).expect("forward");
        assert!(controller.unavailable.active(clock.now()).is_empty());
    });
}

#[test]
fn throttling_is_retried_with_backoff_and_access_denied_names_the_iam_action() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-west-2", "faults").await;
        let aws = env.provider(&proxy.endpoint(), env.config()).await;
        // Two throttled answers, then success: three calls, one result.
        proxy.faults.lock().unwrap().throttle.insert("DescribeInstances".into(), 2);
        aws.list().await.expect("lists after retries");
        assert_eq!(proxy.count("DescribeInstances"), 3);
        // Throttled past the attempts: a typed error naming the action.
        proxy.faults.lock().unwrap().throttle.insert("DescribeInstances".into(), 100);
        let err = aws.list().await.unwrap_err();
        assert_eq!(
            err,
            CloudError::Throttled { action: "ec2:DescribeInstances".into(), attempts: 4 }
        );
        // JSON protocols (SSM) are retried too.
        proxy.faults.lock().unwrap().throttle.insert("GetParameters".into(), 1);
        assert!(aws.resolve_node_class(&env.nodeclass()).await.expect("resolves").is_ready());

        proxy.faults.lock().unwrap().deny.insert("TerminateInstances".into());
        let err = aws.delete("aws:///us-west-2a/i-0123456789abcdef0").await.unwrap_err();
        let CloudError::AccessDenied { action, message } = &err else {
            panic!("expected access denied, got {err}");
        };
        assert_eq!(action, "ec2:TerminateInstances");
        assert!(message.starts_with("UnauthorizedOperation"), "{message}");
        assert!(err.to_string().contains("must allow ec2:TerminateInstances"), "{err}");
        proxy.faults.lock().unwrap().deny.insert("GetParameters".into());
        let err = aws.resolve_node_class(&env.nodeclass()).await.unwrap_err();
        assert!(
            matches!(&err, CloudError::AccessDenied { action, .. } if action == "ssm:GetParameters"),
            "{err}"
        );
    });
}

#[test]
fn on_demand_prices_come_from_the_pricing_api() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let pages = |file: &str| -> Vec<String> {
            let pages: Vec<serde_json::Value> = serde_json::from_str(
                &std::fs::read_to_string(root().join("tests/fixtures/aws").join(file))
                    .expect("fixture"),
            )
            .expect("JSON");
            pages.iter().map(|p| p.to_string()).collect()
        };
        {
            let mut f = proxy.faults.lock().unwrap();
            f.pricing_pages = pages("get-products-us-east-2.json");
            f.pricing_metal_pages = pages("get-products-metal-us-east-2.json");
        }
        let env = Env::new(&proxy.endpoint(), "us-east-2", "pricing").await;
        // A price file under the API's prices, over the built-in ones.
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("prices.json");
        std::fs::write(
            &file,
            r#"{"schema_version": 1, "regions": {"us-east-2": {"on_demand": {"c5.large": 0.5, "r5.large": 0.2}}}}"#,
        )
        .expect("write");
        let mut config = env.config();
        config.isolated_vpc = false;
        config.pricing_file = Some(file);
        let aws = env.provider(&proxy.endpoint(), config).await;
        let types = aws
            .instance_types_for(&env.nodeclass())
            .await
            .expect("lists");
        let price = |name: &str| {
            types
                .iter()
                .find(|t| t.name == name)
                .and_then(|t| t.offerings.iter().find(|o| o.capacity_type == "on-demand"))
                .map(|o| o.price)
        };
        assert_eq!(price("c5.large"), Some(0.085), "the API's price wins");
        assert_eq!(price("m5.xlarge"), Some(0.192), "the second page is read");
        assert_eq!(price("t3.medium"), Some(0.0416));
        assert_eq!(price("m5.metal"), Some(4.608), "bare metal is priced");
        assert_eq!(price("r5.large"), Some(0.2), "the price file's over the built-in");
        // Types neither lists keep their built-in price (us-east-1's table
        // stands in for us-east-2).
        let (builtin, from) = dovetail::cloud::aws::pricing::builtin("us-east-2");
        assert_eq!(from, "us-east-1");
        assert_eq!(price("m6i.large"), builtin.get("m6i.large").copied());
        assert!(price("m6i.large").is_some());

        // Two queries, as Karpenter makes them: shared instances (two
        // pages), then bare metal.
        let bodies = proxy.bodies("GetProducts");
        assert_eq!(bodies.len(), 3);
        let filters = |body: &str| -> BTreeMap<String, String> {
            let v: serde_json::Value = serde_json::from_str(body).expect("JSON request");
            assert_eq!(v["ServiceCode"], "AmazonEC2");
            v["Filters"]
                .as_array()
                .expect("filters")
                .iter()
                .map(|f| {
                    assert_eq!(f["Type"], "TERM_MATCH");
                    (
                        f["Field"].as_str().expect("field").to_string(),
                        f["Value"].as_str().expect("value").to_string(),
                    )
                })
                .collect()
        };
        let shared = filters(&bodies[0]);
        let metal = filters(&bodies[2]);
        for f in [&shared, &metal] {
            for (k, v) in [
                ("regionCode", "us-east-2"),
                ("operatingSystem", "Linux"),
                ("preInstalledSw", "NA"),
                ("capacitystatus", "Used"),
                ("marketoption", "OnDemand"),
            ] {
                assert_eq!(f.get(k).map(String::as_str), Some(v), "{f:?}");
            }
        }
        assert_eq!(shared["tenancy"], "Shared");
        assert_eq!(shared["productFamily"], "Compute Instance");
        assert_eq!(metal["tenancy"], "Dedicated");
        assert_eq!(metal["productFamily"], "Compute Instance (bare metal)");
        assert!(bodies[1].contains("page-2"), "{}", bodies[1]);
    });
}

/// With the Pricing API denied and no price file, the built-in prices
/// stand in: launches are priced and go on, and getting, listing and
/// garbage-collecting instances never ask the Pricing API at all.
#[test]
fn with_the_pricing_api_denied_and_no_price_file_the_builtin_prices_keep_everything_working() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        proxy
            .faults
            .lock()
            .unwrap()
            .deny
            .insert("GetProducts".to_string());
        let env = Env::new(&proxy.endpoint(), "us-west-2", "no-pricing").await;
        let mut config = env.config();
        config.isolated_vpc = false;
        config.pricing_file = None;
        let aws = Arc::new(env.provider(&proxy.endpoint(), config).await);
        // Reading instances first: no pricing call.
        assert!(aws.list().await.expect("lists").is_empty());
        assert_eq!(proxy.count("GetProducts"), 0);

        let (builtin, _) = dovetail::cloud::aws::pricing::builtin("us-west-2");
        let class = env.resolved(&aws).await;
        let launched = aws
            .create(
                &claim("priced", &["m5.large", "c5.large"]),
                &class,
                &BTreeSet::new(),
            )
            .await
            .expect("launches on the built-in prices");
        assert!(proxy.count("GetProducts") > 0, "the API was tried");
        let i = &launched.instance;
        let cheaper = if builtin["c5.large"] < builtin["m5.large"] {
            "c5.large"
        } else {
            "m5.large"
        };
        assert_eq!(i.instance_type, cheaper);
        assert_eq!(i.price, builtin[cheaper]);
        let asked = proxy.count("GetProducts");
        assert_eq!(
            aws.get(&i.provider_id).await.expect("gets").price,
            builtin[cheaper]
        );
        assert_eq!(aws.list().await.expect("lists").len(), 1);
        let orphan = aws
            .create(&claim("crashed", &["c5.large"]), &class, &BTreeSet::new())
            .await
            .expect("launches")
            .instance;

        // Garbage collection of the orphan, as in a controller.
        let clock = Arc::new(ManualClock::new(SystemClock.now()));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let cluster = Arc::new(MemoryCluster::new(dyn_clock.clone()));
        cluster
            .create(recorded(&claim("priced", &["m5.large"]), &i.provider_id))
            .expect("created");
        let mut controller = Controller::new(cluster, aws.clone(), dyn_clock, Settings::default());
        clock.advance(Duration::from_secs(6 * 60)).expect("forward");
        controller.reconcile_garbage().await;
        assert!(matches!(
            aws.get(&orphan.provider_id).await,
            Err(CloudError::NotFound(_))
        ));
        let left: Vec<String> = aws
            .list()
            .await
            .expect("lists")
            .into_iter()
            .map(|i| i.id.clone())
            .collect();
        assert_eq!(left, std::slice::from_ref(&i.id));
        // The failed API is not asked again at every call.
        assert_eq!(proxy.count("GetProducts"), asked);
    });
}

/// The published catalog, beside the repository or in an ancestor of it.
fn shared_catalog() -> PathBuf {
    let manifest = root();
    manifest
        .ancestors()
        .map(|dir| dir.join("shared/data/aws-catalog.json"))
        .chain(std::iter::once(
            manifest.join("../shared/data/aws-catalog.json"),
        ))
        .find(|p| p.is_file())
        .expect("../shared/data/aws-catalog.json (CI checks it out beside the repository)")
}

/// Allocatable as strings per type.
fn allocatable_of(catalog: &serde_json::Value) -> BTreeMap<String, BTreeMap<String, String>> {
    catalog["instanceTypes"]
        .as_array()
        .expect("instanceTypes")
        .iter()
        .map(|t| {
            let a: BTreeMap<String, String> =
                serde_json::from_value(t["allocatable"].clone()).expect("allocatable");
            (t["name"].as_str().expect("name").to_string(), a)
        })
        .collect()
}

#[test]
fn allocatable_matches_the_published_values_for_the_instance_types_moto_knows() {
    let Some(moto) = moto::server() else { return };
    let region = "us-east-1";
    let published_path = shared_catalog();
    let published: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&published_path).expect("catalog"))
            .expect("JSON");
    // A price file with the published on-demand prices, so every type has
    // an offering (moto has no Pricing API).
    let mut prices = BTreeMap::new();
    for t in published["instanceTypes"].as_array().expect("types") {
        if let Some(p) = t["offerings"]
            .as_array()
            .and_then(|o| o.first())
            .and_then(|o| o["price"].as_f64())
        {
            prices.insert(t["name"].as_str().expect("name").to_string(), p);
        }
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let price_file = dir.path().join("prices.json");
    std::fs::write(
        &price_file,
        serde_json::json!({"schema_version": 1, "regions": {region: {"on_demand": prices}}})
            .to_string(),
    )
    .expect("write");

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_dovetail"))
        .args([
            "aws",
            "instance-types",
            "--output",
            "json",
            "--isolated-vpc",
            "--pricing-file",
        ])
        .arg(&price_file)
        .envs(moto.sdk_env(region))
        .output()
        .expect("runs dovetail");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "dovetail aws instance-types failed: {stderr}"
    );
    let stdout = String::from_utf8(output.stdout).expect("UTF-8");
    // The output is a catalog `simulate --catalog` and `plan --catalog` read.
    let ours_path = dir.path().join("catalog.json");
    std::fs::write(&ours_path, &stdout).expect("write");
    let parsed = dovetail::model::catalog::read_catalog(&ours_path).expect("a valid catalog");
    let ours_doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(ours_doc["schema_version"], 1);
    assert_eq!(ours_doc["region"], region);
    let ours = allocatable_of(&ours_doc);
    let theirs = allocatable_of(&published);

    // The types moto offers in the region, straight from moto.
    let known: BTreeSet<String> = runtime().block_on(async {
        let sdk = moto::sdk_config(&moto.endpoint(), region).await;
        let ec2 = aws_sdk_ec2::Client::new(&sdk);
        let mut out = BTreeSet::new();
        let mut token = None;
        loop {
            let page = ec2
                .describe_instance_type_offerings()
                .location_type(aws_sdk_ec2::types::LocationType::AvailabilityZone)
                .set_next_token(token)
                .send()
                .await
                .expect("offerings");
            out.extend(
                page.instance_type_offerings()
                    .iter()
                    .filter_map(|o| o.instance_type())
                    .map(|t| t.as_str().to_string()),
            );
            token = page.next_token().map(str::to_string);
            if token.is_none() {
                break out;
            }
        }
    });
    assert!(known.len() > 1000, "moto knows {} types", known.len());
    let mut matched = 0;
    let mut not_published = Vec::new();
    let mut not_listed = Vec::new();
    let mut differ = Vec::new();
    for name in &known {
        match (ours.get(name), theirs.get(name)) {
            (Some(a), Some(b)) if a == b => matched += 1,
            (Some(a), Some(b)) => differ.push(format!("{name}: ours {a:?}, published {b:?}")),
            (_, None) => not_published.push(name.clone()),
            (None, Some(_)) => not_listed.push(name.clone()),
        }
    }
    let share = matched as f64 / known.len() as f64;
    eprintln!(
        "allocatable: {matched} of {} types moto offers in {region} match ({:.1}%); \
         not in the published catalog: {not_published:?}; not listed by dovetail: {not_listed:?}; differ: {}",
        known.len(),
        share * 100.0,
        differ.len()
    );
    assert!(
        share >= 0.95,
        "only {:.1}% match: {differ:#?}",
        share * 100.0
    );
    // Every difference is explained: no computed value differs, dovetail
    // lists every type both know, and the rest are types the published
    // catalog (EKS Linux nodes) does not have: with moto 5.2, the Mac
    // types (macOS only; dovetail leaves them out too) and dl1.24xlarge.
    assert!(differ.is_empty(), "{differ:#?}");
    assert!(not_listed.is_empty(), "{not_listed:?}");
    assert!(parsed.len() >= matched);

    // Kubelet settings as Karpenter v1.14.1 and nodeadm apply them, against
    // the published values: with `maxPods: 110` and a reserved ENI, kube
    // memory is still reserved for the ENI-limited pods of the default
    // network card, so only pods change; an `evictionSoft` threshold only
    // warns, so nothing changes.
    let variants: [(&str, &str, &[&str], Option<&str>); 2] = [
        (
            "maxPods: 110, --reserved-enis 1",
            "kubelet: {maxPods: 110}",
            &["--reserved-enis", "1"],
            Some("110"),
        ),
        (
            "evictionSoft memory.available 500Mi",
            "kubelet: {evictionSoft: {memory.available: 500Mi}, evictionSoftGracePeriod: {memory.available: 1m}}",
            &[],
            None,
        ),
    ];
    for (label, kubelet, flags, pods) in variants {
        let class_path = dir.path().join("class.yaml");
        std::fs::write(
            &class_path,
            format!(
                "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: variant}}\n\
                 spec:\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n  role: R\n  \
                 subnetSelectorTerms: [{{id: subnet-1}}]\n  securityGroupSelectorTerms: [{{id: sg-1}}]\n  {kubelet}\n"
            ),
        )
        .expect("write");
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_dovetail"))
            .args([
                "aws",
                "instance-types",
                "--output",
                "json",
                "--isolated-vpc",
            ])
            .arg("--pricing-file")
            .arg(&price_file)
            .arg("--nodeclass")
            .arg(&class_path)
            .args(flags)
            .envs(moto.sdk_env(region))
            .output()
            .expect("runs dovetail");
        assert!(
            output.status.success(),
            "{label}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
        let ours = allocatable_of(&doc);
        let mut matched = 0;
        let mut differ = Vec::new();
        for name in &known {
            let (Some(a), Some(b)) = (ours.get(name), theirs.get(name)) else {
                continue;
            };
            let mut want = b.clone();
            if let Some(p) = pods {
                want.insert("pods".to_string(), p.to_string());
            }
            if *a == want {
                matched += 1;
            } else {
                differ.push(format!("{name}: ours {a:?}, expected {want:?}"));
            }
        }
        eprintln!(
            "allocatable ({label}): {matched} of {} types moto offers in {region} match ({:.1}%), {} differ",
            known.len(),
            matched as f64 / known.len() as f64 * 100.0,
            differ.len()
        );
        assert!(
            differ.is_empty(),
            "{label}: {:#?}",
            &differ[..differ.len().min(10)]
        );
        assert!(matched as f64 / known.len() as f64 >= 0.95, "{label}");
    }

    // The table, for a node class with a 50Gi root volume.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_dovetail"))
        .args(["aws", "instance-types", "--isolated-vpc", "--pricing-file"])
        .arg(&price_file)
        .arg("--nodeclass")
        .arg(root().join("examples-repo/nodeclasses/default.yaml"))
        .envs(moto.sdk_env(region))
        .output()
        .expect("runs dovetail");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let table = String::from_utf8(output.stdout).expect("UTF-8");
    assert!(table.starts_with("NAME "), "{table}");
    let m5: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("m5.large "))
        .expect("an m5.large row")
        .split_whitespace()
        .collect();
    // name, cpu, memory, pods, allocatable cpu and memory, offerings, $/h
    assert_eq!(
        m5[..6],
        ["m5.large", "2", "7577Mi", "29", "1930m", "6903Mi"]
    );
    assert_eq!(m5[7], "0.0960");

    // The well-known labels agree too, but those the reference takes from
    // its own tables rather than from EC2 (bandwidths, clock speeds).
    let labels_of = |doc: &serde_json::Value| -> BTreeMap<String, BTreeMap<String, String>> {
        doc["instanceTypes"]
            .as_array()
            .expect("instanceTypes")
            .iter()
            .map(|t| {
                let mut l: BTreeMap<String, String> =
                    serde_json::from_value(t["labels"].clone()).expect("labels");
                l.retain(|k, _| !k.ends_with("-bandwidth") && !k.ends_with("-clock-speed-mhz"));
                (t["name"].as_str().expect("name").to_string(), l)
            })
            .collect()
    };
    let (ours, theirs) = (labels_of(&ours_doc), labels_of(&published));
    let differ: Vec<String> = known
        .iter()
        .filter_map(|n| {
            let (a, b) = (ours.get(n)?, theirs.get(n)?);
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            let wrong: Vec<String> = keys
                .into_iter()
                .filter(|k| a.get(*k) != b.get(*k))
                .map(|k| format!("{k}: {:?} vs {:?}", a.get(k), b.get(k)))
                .collect();
            (!wrong.is_empty()).then(|| format!("{n}: {}", wrong.join(", ")))
        })
        .collect();
    assert!(differ.is_empty(), "{differ:#?}");
}

#[test]
fn the_iam_policy_allows_every_action_the_code_calls() {
    use dovetail::cloud::aws::iam::{ACTIONS, IMPLIED_ACTIONS};
    let policy: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("deploy/iam-policy.json"))
            .expect("deploy/iam-policy.json"),
    )
    .expect("JSON");
    assert_eq!(policy["Version"], "2012-10-17");
    let mut granted = BTreeSet::new();
    for s in policy["Statement"].as_array().expect("statements") {
        assert_eq!(s["Effect"], "Allow");
        match &s["Action"] {
            serde_json::Value::String(a) => {
                granted.insert(a.clone());
            }
            serde_json::Value::Array(list) => {
                granted.extend(list.iter().filter_map(|a| a.as_str().map(str::to_string)));
            }
            other => panic!("unexpected Action {other}"),
        }
    }
    let listed: BTreeSet<String> = ACTIONS
        .iter()
        .map(|a| a.to_string())
        .chain(IMPLIED_ACTIONS.iter().map(|(a, _)| a.to_string()))
        .collect();
    let missing: Vec<&String> = listed.difference(&granted).collect();
    assert!(
        missing.is_empty(),
        "deploy/iam-policy.json does not allow {missing:?}"
    );
    let extra: Vec<&String> = granted.difference(&listed).collect();
    assert!(
        extra.is_empty(),
        "deploy/iam-policy.json allows {extra:?}, which nothing needs"
    );

    // Every SDK operation the code calls, and every action it names to the
    // retry wrapper, is listed.
    let op =
        regex::Regex::new(r"\b(ec2|ssm|sqs|pricing|iam|eks)\s*\.\s*([a-z][a-z0-9_]*)\s*\(\s*\)")
            .unwrap();
    let named = regex::Regex::new(r#""((?:ec2|ssm|sqs|pricing|iam|eks):[A-Za-z]+)""#).unwrap();
    let mut called = BTreeSet::new();
    let mut named_actions = BTreeSet::new();
    let mut files = Vec::new();
    collect_rs(&root().join("src"), &mut files);
    for file in &files {
        let text = std::fs::read_to_string(file).expect("source");
        // Only files that use an AWS SDK crate call AWS (elsewhere `ec2`
        // may name something else).
        if !text.contains("aws_sdk_") {
            continue;
        }
        for c in op.captures_iter(&text) {
            if matches!(&c[2], "clone" | "config" | "as_ref" | "to_string") {
                continue;
            }
            let action: String = c[2]
                .split('_')
                .map(|w| {
                    let mut cs = w.chars();
                    cs.next()
                        .map(|f| f.to_ascii_uppercase().to_string() + cs.as_str())
                        .unwrap_or_default()
                })
                .collect();
            // SQS authorizes a batch call by its single action
            // (DeleteMessageBatch needs sqs:DeleteMessage).
            let action = match (&c[1], action.strip_suffix("Batch")) {
                ("sqs", Some(single)) => single.to_string(),
                _ => action,
            };
            called.insert(format!("{}:{action}", &c[1]));
        }
        named_actions.extend(named.captures_iter(&text).map(|c| c[1].to_string()));
    }
    assert!(
        called.contains("ec2:CreateFleet"),
        "the scan finds SDK calls: {called:?}"
    );
    let unlisted: Vec<&String> = called
        .union(&named_actions)
        .filter(|a| !listed.contains(*a))
        .collect();
    assert!(
        unlisted.is_empty(),
        "the code calls {unlisted:?}: add them to cloud::aws::iam::ACTIONS and deploy/iam-policy.json"
    );
    let unused: Vec<&&str> = ACTIONS.iter().filter(|a| !called.contains(**a)).collect();
    assert!(
        unused.is_empty(),
        "cloud::aws::iam::ACTIONS lists {unused:?}, which the code no longer calls"
    );
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn aws_instance_types_rejects_bad_input_before_calling_aws() {
    let out = crate::support::dovetail(&["aws", "instance-types", "--output", "markdown"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("[possible values: text, json]"),
        "{}",
        out.stderr
    );
    let out = crate::support::dovetail(&[
        "aws",
        "instance-types",
        "--vm-memory-overhead-percent",
        "150",
    ]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("memory overhead"), "{}", out.stderr);
    let out = crate::support::dovetail(&["aws", "instance-types", "--nodeclass", "no/such.yaml"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("no/such.yaml"), "{}", out.stderr);
    assert!(out.stderr.contains("hint: "), "{}", out.stderr);
}

/// The settings Bottlerocket accepts under `settings.kubernetes` that
/// Karpenter v1.14.1 models (`BottlerocketKubernetes`); anything else
/// makes Bottlerocket refuse the user data and the node never joins.
const BOTTLEROCKET_KUBERNETES_SETTINGS: &[&str] = &[
    "api-server",
    "cloud-provider",
    "cluster-certificate",
    "cluster-name",
    "cluster-dns-ip",
    "credential-providers",
    "node-labels",
    "node-taints",
    "max-pods",
    "static-pods",
    "eviction-hard",
    "eviction-soft",
    "eviction-soft-grace-period",
    "eviction-max-pod-grace-period",
    "kube-reserved",
    "system-reserved",
    "allowed-unsafe-sysctls",
    "server-tls-bootstrap",
    "registry-qps",
    "registry-burst",
    "event-qps",
    "event-burst",
    "kube-api-qps",
    "kube-api-burst",
    "container-log-max-size",
    "container-log-max-files",
    "cpu-manager-policy",
    "cpu-manager-policy-options",
    "cpu-manager-reconcile-period",
    "memory-manager-policy",
    "topology-manager-scope",
    "topology-manager-policy",
    "topology-manager-policy-options",
    "image-gc-high-threshold-percent",
    "image-gc-low-threshold-percent",
    "ids-per-pod",
    "cpu-cfs-quota-enforced",
    "shutdown-grace-period",
    "shutdown-grace-period-for-critical-pods",
    "cluster-domain",
    "seccomp-default",
    "pod-pids-limit",
    "device-ownership-from-security-context",
    "single-process-oom-kill",
    "container-log-max-workers",
    "container-log-monitor-interval",
    "hostname-override-source",
    "log-level",
];

/// A launch template as EC2 reports it.
struct ReadBack {
    data: aws_sdk_ec2::types::ResponseLaunchTemplateData,
    user_data: String,
}

/// Every launch template of node class `class`, read back from EC2.
async fn read_back(env: &Env, class: &str) -> Vec<ReadBack> {
    use base64::Engine;
    let templates = env
        .ec2
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name("tag:karpenter.k8s.aws/ec2nodeclass")
                .values(class)
                .build(),
        )
        .filters(
            Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{}", env.cluster))
                .values("owned")
                .build(),
        )
        .send()
        .await
        .expect("DescribeLaunchTemplates");
    let mut out = Vec::new();
    for t in templates
        .launch_templates()
        .iter()
        .filter(|t| !validation_template(t))
    {
        let versions = env
            .ec2
            .describe_launch_template_versions()
            .launch_template_id(t.launch_template_id().expect("an id"))
            .versions("$Latest")
            .send()
            .await
            .expect("DescribeLaunchTemplateVersions");
        let data = versions.launch_template_versions()[0]
            .launch_template_data()
            .expect("data")
            .clone();
        let user_data = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(data.user_data().expect("user data"))
                .expect("base64"),
        )
        .expect("UTF-8");
        out.push(ReadBack { data, user_data });
    }
    out
}

/// The `--node-labels` flag's keys in `text` (AL2, AL2023, Windows).
fn node_label_keys(text: &str) -> Vec<String> {
    let Some(i) = text.find("--node-labels=") else {
        return Vec::new();
    };
    text[i + "--node-labels=".len()..]
        .split([' ', '"', '\'', '\n'])
        .next()
        .unwrap_or_default()
        .split(',')
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_string()))
        .collect()
}

fn forbidden_label(key: &str) -> bool {
    let domain = key.split_once('/').map_or("", |(d, _)| d);
    let under = |root: &str| domain == root || domain.ends_with(&format!(".{root}"));
    (under("kubernetes.io") || under("k8s.io"))
        && !under("kubelet.kubernetes.io")
        && !under("node.kubernetes.io")
}

/// Launches from a node class of every AMI family, with and without
/// `instanceStorePolicy: RAID0`, and reads each launch template back from
/// EC2: its metadata options and block devices, and user data that sets
/// max pods (the launched type's, or the class's), configures RAID0 when
/// asked, keeps `kubernetes.io`/`k8s.io` labels out of the kubelet's
/// flags, writes only settings Bottlerocket accepts, and gives AL2023's
/// NodeConfig the cluster's service CIDR.
/// Without `--cluster-endpoint`, `--cluster-ca-bundle` and
/// `--service-cidr`, the provider asks `eks:DescribeCluster` (moto's EKS)
/// and the launch template's user data carries what it said: nodeadm's
/// endpoint, certificate authority, service CIDR, and the CIDR's `.10` as
/// cluster DNS. A flag given wins over what EKS says.
#[test]
fn cluster_discovery_fills_user_data_from_describe_cluster() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let env = Env::new(&moto.endpoint(), "us-west-2", "discovered").await;
        let sdk = moto::sdk_config(&moto.endpoint(), &env.region).await;
        let eks = aws_sdk_eks::Client::new(&sdk);
        let made = eks
            .create_cluster()
            .name(&env.cluster)
            .role_arn("arn:aws:iam::123456789012:role/eks")
            .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().build())
            .kubernetes_network_config(
                aws_sdk_eks::types::KubernetesNetworkConfigRequest::builder()
                    .service_ipv4_cidr("10.42.0.0/16")
                    .build(),
            )
            .send()
            .await;
        if let Err(e) = made {
            use aws_sdk_eks::error::ProvideErrorMetadata;
            assert_eq!(
                e.code(),
                Some("ResourceInUseException"),
                "CreateCluster: {e:?}"
            );
        }
        let described = eks
            .describe_cluster()
            .name(&env.cluster)
            .send()
            .await
            .expect("DescribeCluster");
        let cluster = described.cluster().expect("a cluster");
        let endpoint = cluster.endpoint().expect("an endpoint").to_string();
        let ca = cluster
            .certificate_authority()
            .and_then(|c| c.data())
            .expect("CA data")
            .to_string();

        let mut config = env.config();
        config.cluster = ClusterAccess::default();
        let aws = env.provider(&moto.endpoint(), config).await;
        let access = aws.discover_cluster(None, None).await.expect("discovers");
        assert_eq!(access.endpoint.as_deref(), Some(endpoint.as_str()));
        assert_eq!(access.ca_bundle.as_deref(), Some(ca.as_str()));
        assert_eq!(access.service_cidr.as_deref(), Some("10.42.0.0/16"));
        let class = env.resolved(&aws).await;
        aws.create(
            &claim("discovered-a", &["m5.large"]),
            &class,
            &BTreeSet::new(),
        )
        .await
        .expect("launches");
        let templates = read_back(&env, "default").await;
        assert_eq!(templates.len(), 1);
        let ud = &templates[0].user_data;
        let body = ud
            .rsplit("Content-Type: application/node.eks.aws")
            .next()
            .and_then(|b| b.split("\n--//").next())
            .expect("a NodeConfig part");
        let node_config: serde_json::Value = serde_json::from_str(body.trim()).expect("JSON");
        let c = &node_config["spec"]["cluster"];
        assert_eq!(c["apiServerEndpoint"], endpoint.as_str());
        assert_eq!(c["certificateAuthority"], ca.as_str());
        assert_eq!(c["cidr"], "10.42.0.0/16");
        assert_eq!(
            node_config["spec"]["kubelet"]["config"]["clusterDNS"],
            serde_json::json!(["10.42.0.10"])
        );

        // The flags win, the controller's own CA comes before EKS's, and
        // the kube-dns Service's address before the CIDR's .10.
        let mut config = env.config();
        config.cluster = ClusterAccess {
            endpoint: Some("https://given.example".into()),
            ..ClusterAccess::default()
        };
        let aws = env.provider(&moto.endpoint(), config).await;
        let access = aws
            .discover_cluster(Some("S1VCRQ=="), Some("10.42.0.53".into()))
            .await
            .expect("discovers");
        assert_eq!(access.endpoint.as_deref(), Some("https://given.example"));
        assert_eq!(access.ca_bundle.as_deref(), Some("S1VCRQ=="));
        assert_eq!(access.service_cidr.as_deref(), Some("10.42.0.0/16"));
        assert_eq!(access.dns_ip.as_deref(), Some("10.42.0.53"));

        // A cluster EKS does not know: without an endpoint that is an
        // error naming the call.
        let mut config = env.config();
        config.cluster_name = "no-such-cluster".into();
        config.cluster = ClusterAccess::default();
        let aws = env.provider(&moto.endpoint(), config).await;
        let e = aws
            .discover_cluster(None, None)
            .await
            .expect_err("unknown cluster");
        assert!(e.to_string().contains("eks:DescribeCluster"), "{e}");
    });
}

/// `connectionTracking`, `ipPrefixCount` and a block device's
/// `volumeInitializationRate`, read back from EC2's launch template as
/// Karpenter's launch sends them: the timeouts and prefixes on the primary
/// interface (which carries the security groups), the rate on the volume.
/// Connection tracking needs the Nitro System: a Xen type is not offered.
#[test]
fn connection_tracking_prefixes_and_volume_initialization_read_back() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let env = Env::new(&moto.endpoint(), "us-west-2", "conntrack").await;
        let aws = env.provider(&moto.endpoint(), env.config()).await;
        let mut class = env.resolved(&aws).await;
        class.spec.connection_tracking = Some(ConnectionTracking {
            tcp_established_timeout: Some(3600),
            udp_stream_timeout: Some(120),
            udp_timeout: None,
        });
        class.spec.ip_prefix_count = Some(2);
        class.spec.block_device_mappings = Some(vec![from_yaml(
            "deviceName: /dev/xvda\nrootVolume: true\nebs: {volumeSize: 40Gi, snapshotID: snap-0123456789abcdef0, volumeInitializationRate: 250}",
        )]);
        let pool: NodePool = from_yaml(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
        );
        let offered: BTreeSet<String> = aws
            .instance_types(&pool, &class)
            .await
            .expect("types")
            .iter()
            .map(|t| t.name.clone())
            .collect();
        assert!(offered.contains("m5.large"), "a Nitro type is offered");
        assert!(!offered.contains("m4.large"), "a Xen type is not: {offered:?}");
        aws.create(&claim("ct-a", &["m5.large"]), &class, &BTreeSet::new())
            .await
            .expect("launches");
        let templates = read_back(&env, "default").await;
        let [t] = templates.as_slice() else {
            panic!("one template, found {}", templates.len());
        };
        assert!(t.data.security_group_ids().is_empty(), "on the interface");
        let [primary] = t.data.network_interfaces() else {
            panic!("one interface: {:?}", t.data.network_interfaces());
        };
        assert_eq!(primary.device_index(), Some(0));
        assert!(!primary.groups().is_empty());
        assert_eq!(primary.ipv4_prefix_count(), Some(2));
        let ct = primary
            .connection_tracking_specification()
            .expect("connection tracking");
        assert_eq!(
            (ct.tcp_established_timeout(), ct.udp_stream_timeout(), ct.udp_timeout()),
            (Some(3600), Some(120), None)
        );
        let ebs = t.data.block_device_mappings()[0].ebs().expect("ebs");
        assert_eq!(ebs.snapshot_id(), Some("snap-0123456789abcdef0"));
        assert_eq!(ebs.volume_initialization_rate(), Some(250));
    });
}

/// `networkInterfaces`, `cpuOptions` and `placementGroupSelector`, launched
/// as Karpenter v1.14.1 launches them, read back from EC2 (moto); moto has no
/// placement groups, so the proxy answers DescribePlacementGroups.
/// - Only types with nested virtualization, an EFA for the EFA-only
///   interface, a second device on card 0 and the partition strategy are
///   offered (Karpenter's compatibility checks, on moto's
///   DescribeInstanceTypes).
/// - The template attaches exactly the configured interfaces: the primary
///   with the prefix and the security groups, the EFA-only one with the
///   groups and nothing EC2 refuses on it; CPU options name nested
///   virtualization; the placement names the group and the lowest partition
///   the NodeClaim allows.
/// - The instance is labelled with the group and partition, and has EFA.
/// - A selector naming no group leaves the class not ready.
#[test]
fn network_interfaces_cpu_options_and_placement_group_read_back() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        proxy.faults.lock().unwrap().placement_groups.push((
            "pg-0a1b2c3d4e".into(),
            "hpc".into(),
            "partition".into(),
            3,
            "available".into(),
        ));
        let env = Env::new(&proxy.endpoint(), "us-west-2", "hpc").await;
        let aws = env.provider(&proxy.endpoint(), env.config()).await;
        let mut class = env.nodeclass();
        class.spec.placement_group_selector = Some(from_yaml("name: hpc"));
        class.spec.network_interfaces = Some(from_yaml(
            "[{networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}, \
              {networkCardIndex: 0, deviceIndex: 1, interfaceType: efa-only}]",
        ));
        class.spec.cpu_options = Some(from_yaml("nestedVirtualization: enabled"));
        class.spec.ip_prefix_count = Some(1);
        let r = aws.resolve_node_class(&class).await.expect("resolves");
        assert!(r.is_ready(), "{}", r.summary());
        assert_eq!(proxy.count("DescribePlacementGroups"), 1);
        let class = with_status(class, &r);
        let types = aws.instance_types_for(&class).await.expect("types");
        let offered: BTreeSet<&str> = types.iter().map(|t| t.name.as_str()).collect();
        assert!(offered.contains("c8i.48xlarge"), "{offered:?}");
        for absent in ["c8i.large", "m5.large", "c5n.9xlarge"] {
            assert!(!offered.contains(absent), "{absent} offered: {offered:?}");
        }
        let it = types.iter().find(|t| t.name == "c8i.48xlarge").unwrap();
        assert_eq!(
            it.requirements
                .single_value("karpenter.k8s.aws/placement-group-id"),
            Some("pg-0a1b2c3d4e")
        );
        let mut c = claim("hpc-a", &["c8i.48xlarge"]);
        c.spec
            .requirements
            .push(dovetail::api::NodeSelectorRequirementWithMinValues::new(
                "karpenter.k8s.aws/placement-group-partition",
                dovetail::api::Operator::In,
                &["3", "2"],
            ));
        let launched = aws
            .create(&c, &class, &BTreeSet::new())
            .await
            .expect("launches")
            .instance;
        assert_eq!(
            launched
                .labels
                .get("karpenter.k8s.aws/placement-group-id")
                .map(String::as_str),
            Some("pg-0a1b2c3d4e")
        );
        assert_eq!(
            launched
                .labels
                .get("karpenter.k8s.aws/placement-group-partition")
                .map(String::as_str),
            Some("2")
        );
        assert!(launched.efa_attached, "the node class attaches EFA");

        // PlacementGroupDrift: the claim's group against the one its class
        // resolves to now.
        let mut placed = c.clone();
        placed.metadata.labels = Some(launched.labels.as_ref().clone().into_iter().collect());
        placed.status = Some(dovetail::api::NodeClaimStatus {
            provider_id: Some(launched.provider_id.clone()),
            ..Default::default()
        });
        let drift = |reasons: Vec<dovetail::drift::DriftReason>| -> Vec<(&'static str, String)> {
            reasons
                .iter()
                .map(|r| (r.condition_reason().1, r.to_string()))
                .collect()
        };
        let same = aws.is_drifted(&placed, &class).await.expect("drift");
        assert!(drift(same.clone()).is_empty(), "{same:?}");
        proxy.faults.lock().unwrap().placement_groups.push((
            "pg-0f9e8d7c6b".into(),
            "hpc2".into(),
            "cluster".into(),
            0,
            "available".into(),
        ));
        let mut moved = class.clone();
        moved.spec.placement_group_selector = Some(from_yaml("name: hpc2"));
        let mut dropped = class.clone();
        dropped.spec.placement_group_selector = None;
        for (other, now) in [(&moved, "pg-0f9e8d7c6b"), (&dropped, "none")] {
            let reasons = drift(aws.is_drifted(&placed, other).await.expect("drift"));
            assert_eq!(
                reasons,
                [(
                    "PlacementGroupDrift",
                    format!("placement group pg-0a1b2c3d4e is not the EC2NodeClass's ({now})")
                )]
            );
        }
        let templates = read_back(&env, "default").await;
        let [t] = templates.as_slice() else {
            panic!("one template, found {}", templates.len());
        };
        let placement = t.data.placement().expect("a placement");
        assert_eq!(placement.group_id(), Some("pg-0a1b2c3d4e"));
        assert_eq!(placement.partition_number(), Some(2));
        assert_eq!(
            t.data
                .cpu_options()
                .and_then(|c| c.nested_virtualization())
                .map(|n| n.as_str()),
            Some("enabled")
        );
        assert!(t.data.security_group_ids().is_empty(), "on the interfaces");
        let [primary, efa] = t.data.network_interfaces() else {
            panic!("two interfaces: {:?}", t.data.network_interfaces());
        };
        assert_eq!(
            (
                primary.network_card_index(),
                primary.device_index(),
                primary.interface_type()
            ),
            (Some(0), Some(0), Some("interface"))
        );
        assert_eq!(primary.ipv4_prefix_count(), Some(1));
        assert!(!primary.groups().is_empty());
        assert_eq!(
            (
                efa.network_card_index(),
                efa.device_index(),
                efa.interface_type()
            ),
            (Some(0), Some(1), Some("efa-only"))
        );
        assert_eq!(efa.groups(), primary.groups());
        assert_eq!(
            efa.ipv4_prefix_count(),
            None,
            "EC2 refuses prefixes on EFA-only"
        );
        assert_eq!(efa.associate_public_ip_address(), None);

        // A selector naming no group: PlacementGroupReady is False.
        let mut missing = env.nodeclass();
        missing.spec.placement_group_selector = Some(from_yaml("name: nope"));
        let r = aws.resolve_node_class(&missing).await.expect("resolves");
        let p = r
            .problems
            .iter()
            .find(|p| p.condition == dovetail::cloud::NodeClassCondition::PlacementGroupReady)
            .expect("a placement group problem");
        assert_eq!(p.reason, "PlacementGroupNotFound");
        assert!(p.message.contains("\"nope\""), "{}", p.message);
    });
}

/// A NodeClaim that requests `vpc.amazonaws.com/efa` launches from a
/// template with an EFA interface per the type's EFA count (moto's
/// c5n.9xlarge: one), read back from EC2; one that does not launches the
/// same type with a plain interface.
#[test]
fn efa_launch_templates_read_back_with_efa_interfaces() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let env = Env::new(&moto.endpoint(), "us-west-2", "efa").await;
        let aws = env.provider(&moto.endpoint(), env.config()).await;
        let class = env.resolved(&aws).await;
        let efa = aws
            .instance_types_for(&class)
            .await
            .expect("types")
            .iter()
            .find(|t| t.name == "c5n.9xlarge")
            .map(|t| t.capacity.get("vpc.amazonaws.com/efa"))
            .expect("moto offers c5n.9xlarge");
        assert_eq!(efa, 1);
        let mut with_efa = claim("efa-a", &["c5n.9xlarge"]);
        with_efa
            .spec
            .resources
            .get_or_insert_with(Default::default)
            .requests
            .get_or_insert_with(Default::default)
            .insert(
                "vpc.amazonaws.com/efa".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
            );
        aws.create(&with_efa, &class, &BTreeSet::new())
            .await
            .expect("launches with EFA");
        aws.create(&claim("efa-b", &["c5n.9xlarge"]), &class, &BTreeSet::new())
            .await
            .expect("launches without");
        let templates = read_back(&env, "default").await;
        assert_eq!(templates.len(), 2);
        type Interface = (Option<i32>, Option<i32>, Option<String>);
        let mut seen: Vec<Vec<Interface>> = templates
            .iter()
            .map(|t| {
                t.data
                    .network_interfaces()
                    .iter()
                    .map(|i| {
                        assert!(!i.groups().is_empty(), "the interface carries the groups");
                        (
                            i.network_card_index(),
                            i.device_index(),
                            i.interface_type().map(str::to_string),
                        )
                    })
                    .collect()
            })
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            vec![vec![], vec![(Some(0), Some(0), Some("efa".to_string()))]]
        );
    });
}

#[test]
fn launch_templates_read_back_from_ec2_carry_what_each_ami_family_needs() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let env = Env::new(&moto.endpoint(), "us-west-2", "readback").await;
        for path in [
            format!("/eks/optimized-ami/{K8S}/amazon-linux-2/recommended/image_id"),
            format!("/bottlerocket/aws-k8s-{K8S}/x86_64/latest/image_id"),
            format!("/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-{K8S}/image_id"),
        ] {
            env.put_parameter(&path, &env.images[0]).await;
        }
        let aws = env.provider(&moto.endpoint(), env.config()).await;
        let labels = "{karpenter.sh/nodepool: default, team: a, node-role.kubernetes.io/worker: '', \
                      example.k8s.io/tier: gold, node.kubernetes.io/lifecycle: x}";
        // (class, alias, RAID0, instance type, kubelet, hop limit)
        let cases: [(&str, &str, bool, &str, &str, i32); 8] = [
            ("al2023", "al2023@latest", false, "m5.large", "{}", 1),
            ("al2023-raid0", "al2023@latest", true, "m5d.large", "{}", 1),
            ("al2023-pods", "al2023@latest", false, "m5.large", "{maxPods: 110}", 2),
            ("al2", "al2@latest", false, "m5.large", "{}", 1),
            ("al2-raid0", "al2@latest", true, "m5d.large", "{}", 1),
            ("bottlerocket", "bottlerocket@latest", false, "m5.large", "{podsPerCore: 4}", 2),
            ("bottlerocket-raid0", "bottlerocket@latest", true, "m5d.large", "{}", 2),
            ("windows", "windows2022@latest", false, "m5.large", "{}", 1),
        ];
        for (name, alias, raid0, instance_type, kubelet, hops) in cases {
            let mut class: EC2NodeClass = from_yaml(&format!(
                "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: {name}}}\n\
                 spec:\n  amiSelectorTerms: [{{alias: '{alias}'}}]\n  role: KarpenterNodeRole-{0}\n  \
                 subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: {0}}}}}]\n  \
                 securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: {0}}}}}]\n  \
                 kubelet: {kubelet}\n  metadataOptions: {{httpPutResponseHopLimit: {hops}}}\n{1}",
                env.cluster,
                if raid0 { "  instanceStorePolicy: RAID0\n" } else { "" }
            ));
            class.apply_defaults();
            let r = aws.resolve_node_class(&class).await.expect("resolves");
            assert!(r.is_ready(), "{name}: {:?}", r.problems);
            let class = with_status(class, &r);
            let claim: NodeClaim = from_yaml(&format!(
                "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: {name}-a\n  labels: {labels}\n\
                 spec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {name}}}\n  \
                 requirements:\n  - {{key: node.kubernetes.io/instance-type, operator: In, values: [{instance_type}]}}\n  \
                 - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n"
            ));
            let launched = aws
                .create(&claim, &class, &BTreeSet::new())
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(launched.instance.instance_type, instance_type, "{name}");
            // Karpenter's labels for the zone's id and the tenancy.
            let zone_id = r
                .subnets
                .iter()
                .find(|s| s.zone == launched.instance.zone)
                .and_then(|s| s.zone_id.clone())
                .expect("moto reports zone ids");
            let labels = &launched.instance.labels;
            assert_eq!(labels.get("topology.k8s.aws/zone-id"), Some(&zone_id), "{name}");
            assert_eq!(
                labels.get("karpenter.k8s.aws/instance-tenancy").map(String::as_str),
                Some("default"),
                "{name}"
            );
            let listed = aws.get(&launched.instance.provider_id).await.expect("gets");
            assert_eq!(listed.labels.get("topology.k8s.aws/zone-id"), Some(&zone_id));
            // The pods a node of the type has under this class.
            let pods = aws
                .instance_types_for(&class)
                .await
                .expect("types")
                .iter()
                .find(|t| t.name == instance_type)
                .map(|t| t.capacity.get("pods"))
                .expect("the type");
            let templates = read_back(&env, name).await;
            assert_eq!(templates.len(), 1, "{name}");
            let t = &templates[0];

            // Network interfaces are tagged with the launch's tags.
            let eni_tags: BTreeMap<&str, &str> = t
                .data
                .tag_specifications()
                .iter()
                .filter(|s| s.resource_type().map(|r| r.as_str()) == Some("network-interface"))
                .flat_map(|s| s.tags())
                .filter_map(|t| Some((t.key()?, t.value()?)))
                .collect();
            assert_eq!(eni_tags.get("karpenter.sh/nodepool"), Some(&"default"), "{name}");
            assert_eq!(
                eni_tags.get(format!("kubernetes.io/cluster/{}", env.cluster).as_str()),
                Some(&"owned"),
                "{name}"
            );
            let m = t.data.metadata_options().expect("metadata options");
            assert_eq!(m.http_tokens().map(|x| x.as_str()), Some("required"), "{name}");
            assert_eq!(m.http_put_response_hop_limit(), Some(hops), "{name}");
            assert_eq!(m.http_endpoint().map(|x| x.as_str()), Some("enabled"), "{name}");
            assert_eq!(
                m.instance_metadata_tags().map(|x| x.as_str()),
                Some("disabled"),
                "{name}"
            );
            type Device = (String, Option<i32>, Option<String>, Option<bool>);
            let devices: Vec<Device> = t
                .data
                .block_device_mappings()
                .iter()
                .map(|b| {
                    let ebs = b.ebs().expect("an EBS volume");
                    (
                        b.device_name().unwrap_or_default().to_string(),
                        ebs.volume_size(),
                        ebs.volume_type().map(|v| v.as_str().to_string()),
                        ebs.encrypted(),
                    )
                })
                .collect();
            let gp3 = |d: &str, gib: i32| (d.to_string(), Some(gib), Some("gp3".to_string()), Some(true));
            let want = match alias.split('@').next() {
                Some("bottlerocket") => vec![gp3("/dev/xvda", 4), gp3("/dev/xvdb", 20)],
                Some("windows2022") => vec![gp3("/dev/sda1", 50)],
                _ => vec![gp3("/dev/xvda", 20)],
            };
            assert_eq!(devices, want, "{name}");

            let ud = &t.user_data;
            let keys: Vec<String> = match alias.split('@').next() {
                Some("al2023") => {
                    // The last MIME part is dovetail's NodeConfig.
                    let body = ud
                        .rsplit("Content-Type: application/node.eks.aws")
                        .next()
                        .and_then(|b| b.split("\n--//").next())
                        .expect("a NodeConfig part");
                    let config: serde_json::Value =
                        serde_json::from_str(body.trim()).expect("a JSON NodeConfig");
                    assert_eq!(config["kind"], "NodeConfig", "{name}");
                    assert_eq!(config["spec"]["cluster"]["cidr"], "10.100.0.0/16", "{name}");
                    assert_eq!(config["spec"]["kubelet"]["config"]["maxPods"], pods, "{name}");
                    let strategy = &config["spec"]["instance"]["localStorage"]["strategy"];
                    if raid0 {
                        assert_eq!(strategy, "RAID0", "{name}");
                    } else {
                        assert!(strategy.is_null(), "{name}: {config}");
                    }
                    node_label_keys(&config["spec"]["kubelet"]["flags"].to_string())
                }
                Some("al2") => {
                    assert!(ud.contains("/etc/eks/bootstrap.sh"), "{name}: {ud}");
                    assert!(ud.contains("--use-max-pods false"), "{name}: {ud}");
                    assert!(ud.contains(&format!("--max-pods={pods} ")) || ud.contains(&format!("--max-pods={pods}'")), "{name}: {ud}");
                    assert_eq!(ud.contains("--local-disks raid0"), raid0, "{name}: {ud}");
                    node_label_keys(ud)
                }
                Some("bottlerocket") => {
                    let doc: toml_edit::DocumentMut = ud.parse().expect("TOML");
                    let k = doc["settings"]["kubernetes"].as_table().expect("settings.kubernetes");
                    let unknown: Vec<&str> = k
                        .iter()
                        .map(|(key, _)| key)
                        .filter(|key| !BOTTLEROCKET_KUBERNETES_SETTINGS.contains(key))
                        .collect();
                    assert!(unknown.is_empty(), "{name}: Bottlerocket has no {unknown:?}: {ud}");
                    assert_eq!(k["max-pods"].as_integer(), Some(pods), "{name}");
                    let command = doc
                        .get("settings")
                        .and_then(|s| s.get("bootstrap-commands"))
                        .and_then(|c| c.get("000-mount-instance-storage"));
                    assert_eq!(command.is_some(), raid0, "{name}: {ud}");
                    if raid0 {
                        let c = command.expect("the command");
                        assert_eq!(c["essential"].as_bool(), Some(true));
                        assert!(c["commands"].to_string().contains("ephemeral-storage"));
                    }
                    k["node-labels"]
                        .as_table()
                        .expect("labels")
                        .iter()
                        .map(|(key, _)| key.to_string())
                        .collect()
                }
                _ => {
                    assert!(ud.starts_with("<powershell>"), "{name}: {ud}");
                    assert!(ud.contains(&format!("--max-pods={pods}")), "{name}: {ud}");
                    node_label_keys(ud)
                }
            };
            assert!(keys.contains(&"team".to_string()), "{name}: {keys:?}");
            assert!(keys.contains(&"node.kubernetes.io/lifecycle".to_string()), "{name}: {keys:?}");
            let forbidden: Vec<&String> = keys.iter().filter(|k| forbidden_label(k)).collect();
            assert!(forbidden.is_empty(), "{name}: the kubelet refuses {forbidden:?}");
        }
    });
}

/// The controller and the AWS provider through the proxy, with `pool`'s
/// NodePool and the test's resolved node class stored in a memory cluster.
pub(crate) async fn controller_for(
    env: &Env,
    aws: &Arc<AwsProvider>,
    class: &EC2NodeClass,
    pool: &str,
) -> (
    Arc<ManualClock>,
    Arc<MemoryCluster>,
    Controller<MemoryCluster, AwsProvider>,
) {
    let clock = Arc::new(ManualClock::new(SystemClock.now()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let cluster = Arc::new(MemoryCluster::new(dyn_clock.clone()));
    store_class_and_pool(&cluster, env, class, pool).await;
    let controller = Controller::new(cluster.clone(), aws.clone(), dyn_clock, Settings::default());
    (clock, cluster, controller)
}

/// Stores the test's node class with `class`'s resolved status, and the
/// NodePool `pool`.
pub(crate) async fn store_class_and_pool(
    cluster: &MemoryCluster,
    env: &Env,
    class: &EC2NodeClass,
    pool: &str,
) {
    let stored = cluster.create(env.nodeclass()).expect("created");
    let mut with = (*stored).clone();
    with.status = class.status.clone();
    Cluster::replace_status(cluster, with)
        .await
        .expect("status");
    cluster
        .create(from_yaml::<NodePool>(pool))
        .expect("created");
}

pub(crate) fn pending_pod(name: &str) -> k8s_openapi::api::core::v1::Pod {
    from_yaml(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n\
         spec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: '1', memory: 1Gi}}}}}}]}}\n\
         status: {{phase: Pending, conditions: [{{type: PodScheduled, status: 'False', reason: Unschedulable}}]}}\n"
    ))
}

/// One provisioning pass that creates a NodeClaim, and its launch.
pub(crate) async fn provision_and_launch(
    clock: &ManualClock,
    controller: &mut Controller<MemoryCluster, AwsProvider>,
) {
    controller.reconcile_provisioning().await;
    clock.advance(BATCH_IDLE).expect("forward");
    controller.reconcile_provisioning().await;
    controller.reconcile_nodeclaims().await;
}

/// `InsufficientFreeAddressesInSubnet`, as Karpenter classifies it: the
/// override's offering is refused and its subnet marked; EC2 launches
/// from the next override, in the other zone; later launches leave the
/// subnet's zone out until the mark expires.
#[test]
fn a_subnet_out_of_addresses_sends_launches_to_another_zone() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-east-2", "full-subnet").await;
        let aws = env.provider(&proxy.endpoint(), env.config()).await;
        let class = env.resolved(&aws).await;
        let (subnet_a, zone_a) = env.subnets[0].clone();
        let (subnet_b, zone_b) = env.subnets[1].clone();
        proxy
            .faults
            .lock()
            .unwrap()
            .full_subnets
            .insert(subnet_a.clone());

        let launched = aws
            .create(&claim("full-1", &["m5.large"]), &class, &BTreeSet::new())
            .await
            .expect("launches in the other zone");
        assert_eq!(launched.instance.zone, zone_b);
        assert_eq!(
            launched.instance.subnet_id.as_deref(),
            Some(subnet_b.as_str())
        );
        assert_eq!(
            launched.refused,
            [dovetail::cloud::OfferingKey {
                instance_type: "m5.large".into(),
                zone: zone_a.clone(),
                capacity_type: "on-demand".into(),
            }]
        );
        let first = proxy.bodies("CreateFleet").remove(0);
        assert!(
            first.contains(&subnet_a),
            "the first launch tried {subnet_a}"
        );

        // The zone of the full subnet is out: not offered, not tried.
        let types = aws.instance_types_for(&class).await.expect("types");
        let m5 = types
            .iter()
            .find(|t| t.name == "m5.large")
            .expect("m5.large");
        for o in &m5.offerings {
            assert_eq!(o.available, o.zone != zone_a, "{o:?}");
        }
        let second = aws
            .create(&claim("full-2", &["m5.large"]), &class, &BTreeSet::new())
            .await
            .expect("launches");
        assert_eq!(second.instance.zone, zone_b);
        assert!(second.refused.is_empty());
        let last = proxy.bodies("CreateFleet").pop().expect("a CreateFleet");
        assert!(!last.contains(&subnet_a), "{last}");
        // A claim for that zone alone cannot launch, and asks EC2 nothing.
        let mut only_a = claim("full-3", &["m5.large"]);
        only_a
            .spec
            .requirements
            .push(dovetail::api::NodeSelectorRequirementWithMinValues::new(
                "topology.kubernetes.io/zone",
                dovetail::api::Operator::In,
                &[zone_a.as_str()],
            ));
        let fleets = proxy.count("CreateFleet");
        assert!(matches!(
            aws.create(&only_a, &class, &BTreeSet::new()).await,
            Err(CloudError::InsufficientCapacity { .. })
        ));
        assert_eq!(proxy.count("CreateFleet"), fleets);
    });
}

/// Capacity reservations, as Karpenter v1.14.1 uses them (moto has none:
/// the proxy answers DescribeCapacityReservations and refuses launches
/// into a full reservation with `ReservationCapacityExceeded`). A NodePool
/// that allows `reserved` and `on-demand` launches into the reservation
/// first, with its labels, through a template that targets it; once it is
/// used up, by dovetail's count or by EC2's answer, the next launch goes
/// on demand.
#[test]
fn a_reserved_nodepool_launches_into_the_reservation_then_on_demand_when_it_is_used_up() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-east-2", "reserved").await;
        let aws = Arc::new(env.provider(&proxy.endpoint(), env.config()).await);
        let zone_a = env.subnets[0].1.clone();
        let id = "cr-0123456789abcdef0";
        proxy.faults.lock().unwrap().reservations = vec![
            aws_proxy::Reservation {
                id: id.to_string(),
                instance_type: "m5.large".into(),
                zone: zone_a.clone(),
                owner_id: "123456789012".into(),
                match_criteria: "targeted".into(),
                reservation_type: "default".into(),
                state: "active".into(),
                end_date: None,
                tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
                available: 1,
                room: 1,
            },
            // Another team's: the selector leaves it out.
            aws_proxy::Reservation {
                id: "cr-0fedcba9876543210".into(),
                instance_type: "m5.large".into(),
                zone: zone_a.clone(),
                owner_id: "123456789012".into(),
                match_criteria: "targeted".into(),
                reservation_type: "default".into(),
                state: "active".into(),
                end_date: None,
                tags: BTreeMap::from([("team".to_string(), "web".to_string())]),
                available: 5,
                room: 5,
            },
        ];
        let mut spec = env.nodeclass();
        spec.spec.capacity_reservation_selector_terms = Some(vec![from_yaml(
            "{tags: {team: ml}, ownerID: '123456789012'}",
        )]);
        // Resolution: the selected reservation in the status.
        let r = aws.resolve_node_class(&spec).await.expect("resolves");
        assert!(r.is_ready(), "{:?}", r.problems);
        let ids: Vec<&str> = r.capacity_reservations.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, [id]);
        let describe = proxy.bodies("DescribeCapacityReservations").remove(0);
        for filter in ["state", "active", "tag%3Ateam", "ml", "owner-id", "123456789012"] {
            assert!(describe.contains(filter), "{filter} in {describe}");
        }
        let class = with_status(spec.clone(), &r);
        let status = class.status.clone().unwrap_or_default();
        let held = status.capacity_reservations.clone().expect("reservations");
        assert_eq!(held[0].availability_zone, zone_a);
        assert_eq!(held[0].instance_type, "m5.large");
        assert_eq!(
            serde_json::to_value(&held[0]).expect("json")["instanceMatchCriteria"],
            "targeted"
        );
        // Offered as reserved, far below on demand.
        let types = aws.instance_types_for(&class).await.expect("types");
        let m5 = types.iter().find(|t| t.name == "m5.large").expect("m5.large");
        let reserved = m5
            .offerings
            .iter()
            .find(|o| o.capacity_type == "reserved")
            .expect("a reserved offering");
        let on_demand = m5
            .offerings
            .iter()
            .find(|o| o.capacity_type == "on-demand")
            .expect("an on-demand offering");
        assert_eq!(reserved.zone, zone_a);
        assert!(reserved.available);
        assert!(reserved.price > 0.0 && reserved.price * 1e6 < on_demand.price, "{reserved:?}");

        // The controller: a NodePool allowing reserved and on-demand.
        let clock = Arc::new(ManualClock::new(SystemClock.now()));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let cluster = Arc::new(MemoryCluster::new(dyn_clock.clone()));
        let stored = cluster.create(spec).expect("created");
        let mut with = (*stored).clone();
        with.status = class.status.clone();
        Cluster::replace_status(cluster.as_ref(), with).await.expect("status");
        cluster
            .create(from_yaml::<NodePool>(
                "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      \
                 nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n      \
                 - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n      \
                 - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}\n",
            ))
            .expect("created");
        let mut controller =
            Controller::new(cluster.clone(), aws.clone(), dyn_clock, Settings::default());
        // The live NodeClaims not among `seen`, which then includes them.
        let fresh = |seen: &mut BTreeSet<String>| -> Vec<NodeClaim> {
            let mut out = Vec::new();
            for c in Cluster::list::<NodeClaim>(cluster.as_ref()) {
                let name = c.metadata.name.clone().unwrap_or_default();
                if c.metadata.deletion_timestamp.is_none() && seen.insert(name) {
                    out.push((*c).clone());
                }
            }
            out
        };
        let mut seen = BTreeSet::new();

        cluster.create(pending_pod("first")).expect("created");
        provision_and_launch(&clock, &mut controller).await;
        let claims = fresh(&mut seen);
        assert_eq!(claims.len(), 1);
        let in_reservation = claims[0].metadata.name.clone().unwrap_or_default();
        let labels = claims[0].metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["karpenter.sh/capacity-type"], "reserved");
        assert_eq!(labels["karpenter.k8s.aws/capacity-reservation-id"], id);
        assert_eq!(labels["karpenter.k8s.aws/capacity-reservation-type"], "default");
        assert_eq!(labels["karpenter.k8s.aws/capacity-reservation-interruptible"], "false");
        assert_eq!(labels["topology.kubernetes.io/zone"], zone_a);
        // The solve planned it into the reservation: the claim requires it.
        let requires = |key: &str| {
            claims[0]
                .spec
                .requirements
                .iter()
                .find(|r| r.key == key)
                .and_then(|r| r.values.clone())
        };
        assert_eq!(requires("karpenter.k8s.aws/capacity-reservation-id"), Some(vec![id.to_string()]));
        assert_eq!(requires("karpenter.sh/capacity-type"), Some(vec!["reserved".to_string()]));
        // The request: an on-demand fleet of the reservation's one offering,
        // through a template that targets the reservation alone.
        let fleet = proxy.bodies("CreateFleet").pop().expect("a CreateFleet");
        assert!(fleet.contains("DefaultTargetCapacityType=on-demand"), "{fleet}");
        assert_eq!(fleet.matches("InstanceType=").count(), 1, "{fleet}");
        let template = proxy.bodies("CreateLaunchTemplate").pop().expect("a template");
        assert!(template.contains("CapacityReservationPreference=capacity-reservations-only"), "{template}");
        assert!(template.contains(&format!("CapacityReservationId={id}")), "{template}");

        // dovetail counted that launch: the reservation is used up, and the
        // next pod's claim launches on demand, using no reservation.
        let types = aws.instance_types_for(&class).await.expect("types");
        let m5 = types.iter().find(|t| t.name == "m5.large").expect("m5.large");
        assert!(m5.offerings.iter().all(|o| o.capacity_type != "reserved" || !o.available));
        cluster.create(pending_pod("second")).expect("created");
        clock.advance(Duration::from_secs(1)).expect("forward");
        provision_and_launch(&clock, &mut controller).await;
        let claims = fresh(&mut seen);
        assert_eq!(claims.len(), 1);
        let labels = claims[0].metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand", "{labels:?}");
        assert!(!labels.contains_key("karpenter.k8s.aws/capacity-reservation-id"));
        let template = proxy.bodies("CreateLaunchTemplate").pop().expect("a template");
        assert!(template.contains("CapacityReservationPreference=none"), "{template}");
        assert!(!template.contains("CapacityReservationTarget"), "{template}");

        // EC2 says there is room again (its count lags), but the fleet
        // finds none: the launch fails as insufficient capacity, the
        // reservation is full until EC2 says otherwise, and the next solve
        // launches on demand.
        {
            let mut f = proxy.faults.lock().unwrap();
            f.reservations[0].available = 1;
            f.reservations[0].room = 0;
        }
        let r = aws.resolve_node_class(&class).await.expect("resolves");
        assert_eq!(r.capacity_reservations.len(), 1);
        cluster.create(pending_pod("third")).expect("created");
        clock.advance(Duration::from_secs(1)).expect("forward");
        provision_and_launch(&clock, &mut controller).await;
        let _ = fresh(&mut seen);
        let refused = proxy.bodies("CreateFleet").pop().expect("a CreateFleet");
        assert!(refused.contains("DefaultTargetCapacityType=on-demand"));
        let events = controller.drain_events();
        assert!(events.iter().any(|e| e.reason == "InsufficientCapacity"), "{events:?}");
        let marked: Vec<String> = controller
            .unavailable
            .active(clock.now())
            .into_iter()
            .map(|o| format!("{}/{}/{}", o.instance_type, o.zone, o.capacity_type))
            .collect();
        assert_eq!(marked, [format!("m5.large/{zone_a}/reserved")]);
        let types = aws.instance_types_for(&class).await.expect("types");
        let m5 = types.iter().find(|t| t.name == "m5.large").expect("m5.large");
        assert!(m5.offerings.iter().all(|o| o.capacity_type != "reserved" || !o.available));
        clock.advance(Duration::from_secs(1)).expect("forward");
        controller.reconcile_nodeclaims().await;
        provision_and_launch(&clock, &mut controller).await;
        let claims = fresh(&mut seen);
        assert_eq!(claims.len(), 1, "one new claim for the third pod");
        let labels = claims[0].metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand", "{labels:?}");
        assert_eq!(
            proxy.faults.lock().unwrap().reservations[1].room,
            5,
            "the other team's reservation is untouched"
        );

        // Were it a capacity block ending in 30 minutes, it is expiring
        // (the status says so once the controller resolves the class), and
        // the node launched into it is deleted ahead of EC2's reclaim.
        {
            let mut f = proxy.faults.lock().unwrap();
            f.reservations[0].reservation_type = "capacity-block".into();
            f.reservations[0].end_date = Some(dovetail::clock::format_rfc3339(
                SystemClock.now() + Duration::from_secs(30 * 60),
            ));
        }
        controller.drain_events();
        controller.reconcile_disruption().await;
        let stored = Cluster::list::<EC2NodeClass>(cluster.as_ref())[0].clone();
        let state = stored
            .status
            .as_ref()
            .and_then(|s| s.capacity_reservations.as_ref())
            .map(|r| serde_json::to_value(&r[0]).expect("json")["state"].clone());
        assert_eq!(state, Some(serde_json::json!("expiring")));
        let claim = Cluster::list::<NodeClaim>(cluster.as_ref())
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some(in_reservation.as_str()));
        assert!(
            claim.is_none_or(|c| c.metadata.deletion_timestamp.is_some()),
            "the NodeClaim in the expiring block is deleted"
        );
        let events = controller.drain_events();
        assert!(
            events.iter().any(|e| e.reason == "CapacityReservationExpiring"),
            "{events:?}"
        );
        // Others stay.
        let live = Cluster::list::<NodeClaim>(cluster.as_ref())
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .count();
        assert!(live >= 2, "{live}");
    });
}

/// Without the Spot service-linked role (and the right to create it),
/// EC2 refuses every spot launch. As Karpenter does, spot is marked
/// unavailable, the claim fails as insufficient capacity, and the next
/// claim for the same pods launches on demand.
#[test]
fn a_missing_spot_service_linked_role_ends_in_an_on_demand_launch() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-east-2", "spot-role").await;
        let aws = Arc::new(env.provider(&proxy.endpoint(), env.config()).await);
        let class = env.resolved(&aws).await;
        proxy.faults.lock().unwrap().spot_role_missing = true;
        let (clock, cluster, mut controller) = controller_for(
            &env,
            &aws,
            &class,
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      \
             nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n      \
             - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n      \
             - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}\n",
        )
        .await;
        cluster.create(pending_pod("web")).expect("created");
        provision_and_launch(&clock, &mut controller).await;
        // The spot launch failed; its claim is gone.
        let asked = proxy.bodies("CreateFleet");
        assert_eq!(asked.len(), 1);
        assert!(
            asked[0].contains("DefaultTargetCapacityType=spot"),
            "{}",
            asked[0]
        );
        assert!(Cluster::list::<NodeClaim>(cluster.as_ref()).is_empty());
        let events = controller.drain_events();
        assert!(
            events.iter().any(|e| e.reason == "InsufficientCapacity"),
            "{events:?}"
        );
        // The next solve launches the pod's node on demand.
        clock.advance(Duration::from_secs(1)).expect("forward");
        provision_and_launch(&clock, &mut controller).await;
        let claims = Cluster::list::<NodeClaim>(cluster.as_ref());
        assert_eq!(claims.len(), 1);
        let labels = claims[0].metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
        let asked = proxy.bodies("CreateFleet");
        assert_eq!(asked.len(), 2);
        assert!(
            asked[1].contains("DefaultTargetCapacityType=on-demand"),
            "{}",
            asked[1]
        );
        let pid = claims[0]
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .expect("launched");
        assert_eq!(aws.get(&pid).await.expect("exists").capacity_type, "on-demand");
    });
}

/// A CreateFleet whose answer is lost (EC2 launched, the caller got a 503)
/// is retried with the same ClientToken, so EC2 answers with the first
/// fleet instead of launching a second instance.
#[test]
fn a_create_fleet_retried_after_a_lost_answer_carries_the_same_client_token() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-west-2", "token").await;
        let aws = env.provider(&proxy.endpoint(), env.config()).await;
        let class = env.resolved(&aws).await;
        proxy.faults.lock().unwrap().lose_fleet_answers = 1;
        let launched = aws
            .create(&claim("token-1", &["m5.large"]), &class, &BTreeSet::new())
            .await
            .expect("launches after the retry");
        let bodies = proxy.bodies("CreateFleet");
        assert_eq!(bodies.len(), 2, "one attempt, one retry");
        let token = |body: &str| -> Option<String> {
            body.split('&')
                .find_map(|p| p.strip_prefix("ClientToken="))
                .map(str::to_string)
        };
        let first = token(&bodies[0]).expect("a ClientToken");
        assert_eq!(token(&bodies[1]).as_deref(), Some(first.as_str()));
        // One instance, the one the first attempt launched.
        let listed: Vec<String> = aws
            .list()
            .await
            .expect("lists")
            .into_iter()
            .filter(|i| i.nodeclaim == "token-1")
            .map(|i| i.id.clone())
            .collect();
        assert_eq!(listed, std::slice::from_ref(&launched.instance.id));
        // Another launch is another request: a new token.
        aws.create(&claim("token-2", &["m5.large"]), &class, &BTreeSet::new())
            .await
            .expect("launches");
        let third = proxy.bodies("CreateFleet").pop().expect("a CreateFleet");
        assert_ne!(token(&third).as_deref(), Some(first.as_str()));
    });
}

/// A launch template deleted behind dovetail's back (by hand, or by
/// another cleanup): EC2 refuses the CreateFleet that names it; the cache
/// is dropped and the template made again, and the launch goes on.
#[test]
fn a_launch_template_deleted_out_of_band_is_recreated_by_the_next_launch() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-west-2", "lt-gone").await;
        let aws = env.provider(&proxy.endpoint(), env.config()).await;
        let class = env.resolved(&aws).await;
        aws.create(&claim("lt-1", &["m5.large"]), &class, &BTreeSet::new())
            .await
            .expect("launches");
        let names = env.launch_templates().await;
        assert_eq!(names.len(), 1);
        env.ec2
            .delete_launch_template()
            .launch_template_name(&names[0])
            .send()
            .await
            .expect("DeleteLaunchTemplate");
        assert!(env.launch_templates().await.is_empty());
        let second = aws
            .create(&claim("lt-2", &["m5.large"]), &class, &BTreeSet::new())
            .await
            .expect("launches after recreating the template");
        assert_eq!(
            env.launch_templates().await,
            names,
            "the same template again"
        );
        // Validation's template (for its dry-runs), the launch's, and the
        // launch's again.
        assert_eq!(proxy.count("CreateLaunchTemplate"), 3);
        assert_eq!(
            env.tags(&second.instance.id).await["karpenter.sh/nodeclaim"],
            "lt-2"
        );
    });
}

/// The built-in prices (`src/cloud/aws/builtin-prices.json`) are generated
/// from the published catalog: its on-demand prices (every zone of it
/// offers a type at one price), with its source and date. After a new
/// catalog, `DOVETAIL_BLESS=1 cargo test --test main builtin_prices`
/// writes them again.
#[test]
fn builtin_prices_are_generated_from_the_published_catalog() {
    let catalog: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(shared_catalog()).expect("catalog"))
            .expect("JSON");
    let source = catalog["source"].as_str().expect("the catalog's source");
    // The catalog's source ends with its date, `(YYYY-MM)`.
    let date = source
        .rsplit_once('(')
        .and_then(|(_, d)| d.strip_suffix(')'))
        .expect("a date in the source");
    let region = "us-east-1";
    let mut prices = BTreeMap::new();
    for t in catalog["instanceTypes"].as_array().expect("types") {
        let name = t["name"].as_str().expect("name");
        let offered: BTreeSet<String> = t["offerings"]
            .as_array()
            .expect("offerings")
            .iter()
            .filter(|o| o["capacityType"] == "on-demand")
            .map(|o| o["price"].to_string())
            .collect();
        assert!(
            offered.len() <= 1,
            "{name}: one price per type: {offered:?}"
        );
        if let Some(p) = offered.into_iter().next() {
            prices.insert(name.to_string(), p);
        }
    }
    let body: Vec<String> = prices
        .iter()
        .map(|(name, p)| format!("    \"{name}\": {p}"))
        .collect();
    let text = format!(
        "{{\"schema_version\": 1,\n \"source\": {},\n \"date\": \"{date}\",\n \"regions\": {{\"{region}\": {{\"on_demand\": {{\n{}\n}}}}}}}}\n",
        serde_json::Value::String(format!(
            "{source}; generated from ../shared/data/aws-catalog.json"
        )),
        body.join(",\n")
    );
    crate::support::assert_matches_file(&text, Path::new("src/cloud/aws/builtin-prices.json"));
    // It is a price file dovetail reads.
    let read = dovetail::cloud::aws::pricing::parse_price_file(&text, region).expect("valid");
    assert_eq!(read.len(), prices.len());
    assert!(read.len() > 1000, "{}", read.len());
}

/// `src/cloud/aws/builtin-pod-eni.json` is the published catalog's
/// `vpc.amazonaws.com/pod-eni` per type (branch interfaces: not an EC2
/// fact, and nothing reserves any, so allocatable is capacity). After a new
/// catalog: `DOVETAIL_BLESS=1 cargo test --test main builtin_pod_eni`.
#[test]
fn builtin_pod_eni_is_generated_from_the_published_catalog() {
    let catalog: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(shared_catalog()).expect("catalog"))
            .expect("JSON");
    let source = catalog["source"].as_str().expect("the catalog's source");
    let mut table = BTreeMap::new();
    for t in catalog["instanceTypes"].as_array().expect("types") {
        let name = t["name"].as_str().expect("name");
        if let Some(n) = t["allocatable"]["vpc.amazonaws.com/pod-eni"].as_str() {
            let n: i64 = n.parse().expect("a whole number");
            table.insert(name.to_string(), n);
        }
    }
    let body: Vec<String> = table
        .iter()
        .map(|(name, n)| format!("    \"{name}\": {n}"))
        .collect();
    let text = format!(
        "{{\"schema_version\": 1,\n \"source\": {},\n \"pod_eni\": {{\n{}\n}}}}\n",
        serde_json::Value::String(format!(
            "{source}; generated from ../shared/data/aws-catalog.json"
        )),
        body.join(",\n")
    );
    crate::support::assert_matches_file(&text, Path::new("src/cloud/aws/builtin-pod-eni.json"));
    assert!(table.len() > 1000, "{}", table.len());
    for (name, n) in &table {
        assert_eq!(
            dovetail::cloud::aws::instance_types::pod_eni(name),
            Some(*n),
            "{name}"
        );
    }
}

/// Polls `check` every 20 ms for up to 10 s.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} did not happen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The provider's background work: the Kubernetes version is read again
/// (every 5 minutes, here every 50 ms), so after an upgrade the alias
/// resolves to the new version's image and running nodes drift; a
/// registered node's instance is tagged with its name; and while the
/// replica leads, launch templates no node class uses any more are
/// deleted.
#[test]
fn the_background_follows_the_kubernetes_version_names_instances_and_deletes_unused_launch_templates()
 {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let env = Env::new(&moto.endpoint(), "eu-west-1", "upgrade").await;
        env.put_parameter(
            "/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/standard/recommended/image_id",
            &env.images[1],
        )
        .await;
        let mut config = env.config();
        config.kubernetes_version_ttl = Duration::from_millis(50);
        config.launch_template_cleanup_interval = Duration::from_millis(50);
        config.background_tick = Duration::from_millis(10);
        config.pricing_file = None;
        let aws = Arc::new(env.provider(&moto.endpoint(), config).await);
        let version = Arc::new(Mutex::new(K8S.to_string()));
        let leading = Arc::new(AtomicBool::new(false));
        let classes: Arc<Mutex<Vec<EC2NodeClass>>> = Arc::new(Mutex::new(Vec::new()));
        let registered: Arc<Mutex<Vec<dovetail::cloud::aws::Registered>>> =
            Arc::new(Mutex::new(Vec::new()));
        let work = {
            let (version, leading, classes) = (version.clone(), leading.clone(), classes.clone());
            dovetail::cloud::aws::Background {
                kubernetes_version: Some(Arc::new(move || {
                    let v = version.lock().unwrap().clone();
                    Box::pin(async move { Ok(format!("v{v}.2-eks-f69f56f")) })
                })),
                nodeclasses: Box::new(move || {
                    leading
                        .load(Ordering::Relaxed)
                        .then(|| classes.lock().unwrap().clone())
                }),
                registered: {
                    let registered = registered.clone();
                    Box::new(move || registered.lock().unwrap().clone())
                },
            }
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let background = {
            let aws = aws.clone();
            tokio::spawn(async move {
                aws.run_background(work, async {
                    let _ = stop_rx.await;
                })
                .await
            })
        };

        let class = env.resolved(&aws).await;
        assert_eq!(
            class.status.as_ref().unwrap().amis.as_ref().unwrap()[0].id,
            env.images[0]
        );
        let a = claim("upgrade-a", &["m5.large"]);
        let launched = aws
            .create(&a, &class, &BTreeSet::new())
            .await
            .expect("launches")
            .instance;
        let a = recorded(&a, &launched.provider_id);
        let before = env.launch_templates().await;
        assert_eq!(before.len(), 1);

        // The node registers: its instance gets the node's name.
        assert!(!env.tags(&launched.id).await.contains_key("Name"));
        *registered.lock().unwrap() = vec![dovetail::cloud::aws::Registered {
            nodeclaim: "upgrade-a".into(),
            provider_id: launched.provider_id.clone(),
            node_name: "ip-10-0-0-7.eu-west-1.compute.internal".into(),
        }];
        eventually("the Name tag", async || {
            env.tags(&launched.id).await.get("Name").map(String::as_str)
                == Some("ip-10-0-0-7.eu-west-1.compute.internal")
        })
        .await;

        // The control plane is upgraded.
        *version.lock().unwrap() = "1.35".to_string();
        eventually("the version change", async || {
            aws.kubernetes_version().as_deref() == Some("1.35")
        })
        .await;
        let r = aws.resolve_node_class(&class).await.expect("resolves");
        assert_eq!(r.amis[0].id, env.images[1], "the 1.35 image");
        let class = with_status(class, &r);
        assert_eq!(
            aws.is_drifted(&a, &class).await.expect("checks"),
            vec![DriftReason::Ami {
                image: env.images[0].clone()
            }]
        );

        // Not leading: nothing is deleted. Leading: the old image's
        // template goes.
        *classes.lock().unwrap() = vec![class.clone()];
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(env.launch_templates().await, before);
        leading.store(true, Ordering::Relaxed);
        eventually("the cleanup", async || {
            env.launch_templates().await.is_empty()
        })
        .await;

        let _ = stop_tx.send(());
        background.await.expect("the background work stops");
    });
}

/// A delete is done only once EC2 has the instance shutting down: a
/// TerminateInstances that leaves it running is an error (retried by the
/// controller), not a success that releases the NodeClaim.
#[test]
fn delete_is_done_only_once_the_instance_is_shutting_down() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-west-2", "still-running").await;
        let aws = env.provider(&proxy.endpoint(), env.config()).await;
        let class = env.resolved(&aws).await;
        let i = aws
            .create(&claim("running", &["m5.large"]), &class, &BTreeSet::new())
            .await
            .expect("launches")
            .instance;
        proxy.faults.lock().unwrap().terminate_keeps_running = true;
        let err = aws.delete(&i.provider_id).await.unwrap_err();
        assert!(
            matches!(&err, CloudError::Api(m) if m.contains("still running")),
            "{err}"
        );
        assert_eq!(
            aws.get(&i.provider_id).await.expect("exists").state,
            InstanceState::Running
        );
        proxy.faults.lock().unwrap().terminate_keeps_running = false;
        aws.delete(&i.provider_id).await.expect("terminates");
        assert!(matches!(
            aws.delete(&i.provider_id).await,
            Err(CloudError::NotFound(_))
        ));
    });
}

/// Node classes with `spec.role` get an instance profile as Karpenter
/// makes them (name from the cluster and a hash of the class, Karpenter's
/// path and tags, the role added), reuse a profile their status names
/// when it holds the role (adopting Karpenter's), make a new one when the
/// role changes, report a missing role as a problem without leaving a
/// profile behind, and lose profiles nothing uses any more (never one a
/// live instance runs with).
#[test]
fn role_based_node_classes_get_adopt_and_garbage_collect_instance_profiles() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-east-2", "profiles").await;
        // The test's own IAM calls go to moto, past the proxy's count.
        let sdk = moto::sdk_config(&moto.endpoint(), &env.region).await;
        let iam = aws_sdk_iam::Client::new(&sdk);
        let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
        for role in ["ProfilesNodeRole", "ProfilesOtherRole"] {
            iam.create_role()
                .role_name(role)
                .assume_role_policy_document(trust)
                .send()
                .await
                .expect("CreateRole");
        }
        let mut config = env.config();
        config.protected_profile_ttl = Duration::ZERO;
        let aws = env.provider(&proxy.endpoint(), config).await;
        let path = "/karpenter/us-east-2/profiles/";
        let listed = async || -> BTreeMap<String, (String, Option<String>)> {
            let out = iam
                .list_instance_profiles()
                .path_prefix(path)
                .send()
                .await
                .expect("ListInstanceProfiles");
            // moto ignores PathPrefix.
            out.instance_profiles()
                .iter()
                .filter(|p| p.path().starts_with(path))
                .map(|p| {
                    (
                        p.instance_profile_name().to_string(),
                        (
                            p.path().to_string(),
                            p.roles().first().map(|r| r.role_name().to_string()),
                        ),
                    )
                })
                .collect()
        };

        let mut class = env.nodeclass();
        class.metadata.uid = Some("0a1b2c3d".into());
        class.spec.role = Some("ProfilesNodeRole".into());
        let r = aws.resolve_node_class(&class).await.expect("resolves");
        assert!(r.is_ready(), "{:?}", r.problems);
        let profile = r.instance_profile.clone().expect("a profile");
        assert!(profile.starts_with("profiles_"), "{profile}");
        let all = listed().await;
        assert_eq!(
            all.get(&profile),
            Some(&(
                format!("{path}0a1b2c3d/"),
                Some("ProfilesNodeRole".to_string())
            ))
        );
        let tags: BTreeMap<String, String> = iam
            .get_instance_profile()
            .instance_profile_name(&profile)
            .send()
            .await
            .expect("GetInstanceProfile")
            .instance_profile()
            .expect("a profile")
            .tags()
            .iter()
            .map(|t| (t.key().to_string(), t.value().to_string()))
            .collect();
        for (k, v) in [
            ("kubernetes.io/cluster/profiles", "owned"),
            ("eks:eks-cluster-name", "profiles"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("topology.kubernetes.io/region", "us-east-2"),
            ("team", "platform"),
        ] {
            assert_eq!(tags.get(k).map(String::as_str), Some(v), "{tags:?}");
        }

        // With the status naming it, the profile is used as it is.
        let class = with_status(class, &r);
        let again = aws.resolve_node_class(&class).await.expect("resolves");
        assert_eq!(again.instance_profile.as_deref(), Some(profile.as_str()));
        assert_eq!(proxy.count("CreateInstanceProfile"), 1);
        // Launches run with it.
        let launched = aws
            .create(&claim("profiled", &["m5.large"]), &class, &BTreeSet::new())
            .await
            .expect("launches")
            .instance;
        // moto's fleet instances ignore the template's profile (EC2 gives
        // it to them): associate it as EC2 would have.
        moto_ec2(&moto.endpoint(), &env.region)
            .await
            .associate_iam_instance_profile()
            .instance_id(&launched.id)
            .iam_instance_profile(
                aws_sdk_ec2::types::IamInstanceProfileSpecification::builder()
                    .name(&profile)
                    .build(),
            )
            .send()
            .await
            .expect("AssociateIamInstanceProfile");
        let template = read_back(&env, "default").await;
        assert_eq!(
            template[0]
                .data
                .iam_instance_profile()
                .and_then(|p| p.name()),
            Some(profile.as_str())
        );

        // A profile Karpenter made, named in the status: adopted.
        let karpenters = "profiles_1234567890";
        iam.create_instance_profile()
            .instance_profile_name(karpenters)
            .path(format!("{path}0a1b2c3d/"))
            .send()
            .await
            .expect("CreateInstanceProfile");
        iam.add_role_to_instance_profile()
            .instance_profile_name(karpenters)
            .role_name("ProfilesNodeRole")
            .send()
            .await
            .expect("AddRoleToInstanceProfile");
        let mut adopted = class.clone();
        adopted.status.as_mut().unwrap().instance_profile = Some(karpenters.into());
        let r = aws.resolve_node_class(&adopted).await.expect("resolves");
        assert_eq!(r.instance_profile.as_deref(), Some(karpenters));
        assert_eq!(proxy.count("CreateInstanceProfile"), 1);

        // A new role: a new profile.
        let mut changed = class.clone();
        changed.spec.role = Some("ProfilesOtherRole".into());
        let r = aws.resolve_node_class(&changed).await.expect("resolves");
        let other = r.instance_profile.clone().expect("a profile");
        assert_ne!(other, profile);
        assert_eq!(
            listed().await[&other].1.as_deref(),
            Some("ProfilesOtherRole")
        );
        let changed = with_status(changed, &r);

        // A role IAM does not know: a problem, and no profile left.
        let mut missing = class.clone();
        missing.metadata.name = Some("missing".into());
        missing.metadata.uid = Some("ffff".into());
        missing.spec.role = Some("NoSuchRole".into());
        missing.status = None;
        let r = aws.resolve_node_class(&missing).await.expect("resolves");
        assert!(!r.is_ready());
        assert!(
            r.problems.iter().any(|p| p.message.starts_with("spec.role")
                && p.message.contains("NoSuchRole")
                && p.condition.as_str() == "InstanceProfileReady"),
            "{:?}",
            r.problems
        );
        assert!(!listed().await.values().any(|(p, _)| p.contains("ffff")));

        // Garbage collection: what the class's status names and what the
        // running instance uses stay; Karpenter's, unused, goes.
        let deleted = aws
            .cleanup_instance_profiles(std::slice::from_ref(&changed))
            .await
            .expect("cleans");
        assert_eq!(deleted, [karpenters.to_string()]);
        let left: BTreeSet<String> = listed().await.into_keys().collect();
        assert_eq!(left, BTreeSet::from([profile.clone(), other.clone()]));
        // The node class is gone and its instance terminated: all go.
        aws.delete(&launched.provider_id).await.expect("terminates");
        let deleted: BTreeSet<String> = aws
            .cleanup_instance_profiles(&[])
            .await
            .expect("cleans")
            .into_iter()
            .collect();
        assert_eq!(deleted, BTreeSet::from([profile, other]));
        assert!(listed().await.is_empty());
    });
}

/// An EC2 client straight to moto (past any proxy).
async fn moto_ec2(endpoint: &str, region: &str) -> aws_sdk_ec2::Client {
    aws_sdk_ec2::Client::new(&moto::sdk_config(endpoint, region).await)
}

/// The subset of IAM's policy language `deploy/iam-policy.json` uses,
/// evaluated as AWS does for a single identity policy: a request is
/// allowed when some `Allow` statement matches its action and resource and
/// all of that statement's conditions hold (there are no `Deny`s). An
/// operator the evaluator does not know fails the test.
mod iam_eval {
    use std::collections::BTreeMap;

    use serde_json::Value;

    /// One request: its action, resource ARN and context keys (each with
    /// its values).
    pub struct Request {
        pub action: &'static str,
        pub resource: String,
        pub context: BTreeMap<String, Vec<String>>,
    }

    impl Request {
        pub fn new(action: &'static str, resource: impl Into<String>) -> Self {
            Request {
                action,
                resource: resource.into(),
                context: BTreeMap::new(),
            }
        }

        pub fn with(mut self, key: &str, values: &[&str]) -> Self {
            self.context.insert(
                key.to_string(),
                values.iter().map(|v| v.to_string()).collect(),
            );
            self
        }

        /// `aws:ResourceTag/<k>` for each tag.
        pub fn resource_tags(mut self, tags: &BTreeMap<String, String>) -> Self {
            for (k, v) in tags {
                self.context
                    .insert(format!("aws:ResourceTag/{k}"), vec![v.clone()]);
            }
            self
        }

        /// `aws:RequestTag/<k>` for each tag, and `aws:TagKeys`.
        pub fn request_tags(mut self, tags: &BTreeMap<String, String>) -> Self {
            for (k, v) in tags {
                self.context
                    .insert(format!("aws:RequestTag/{k}"), vec![v.clone()]);
            }
            self.context
                .insert("aws:TagKeys".to_string(), tags.keys().cloned().collect());
            self
        }
    }

    /// `*` any run of characters, `?` one character.
    pub fn glob(pattern: &str, s: &str) -> bool {
        let (p, s): (Vec<char>, Vec<char>) = (pattern.chars().collect(), s.chars().collect());
        let (mut pi, mut si, mut star, mut mark) = (0, 0, None, 0);
        while si < s.len() {
            if pi < p.len() && (p[pi] == '?' || p[pi] == s[si]) {
                pi += 1;
                si += 1;
            } else if pi < p.len() && p[pi] == '*' {
                star = Some(pi);
                mark = si;
                pi += 1;
            } else if let Some(st) = star {
                pi = st + 1;
                mark += 1;
                si = mark;
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|c| *c == '*')
    }

    fn strings(v: &Value) -> Vec<String> {
        match v {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .map(|x| x.as_str().expect("a string").to_string())
                .collect(),
            other => panic!("not a string or list: {other}"),
        }
    }

    fn condition_holds(operator: &str, key: &str, want: &[String], req: &Request) -> bool {
        let have = req.context.get(key);
        match operator {
            "StringEquals" => have.is_some_and(|h| h.iter().any(|v| want.contains(v))),
            "StringLike" => have.is_some_and(|h| h.iter().any(|v| want.iter().any(|w| glob(w, v)))),
            "StringEqualsIfExists" => have.is_none_or(|h| h.iter().any(|v| want.contains(v))),
            "ForAllValues:StringEquals" => have.is_none_or(|h| h.iter().all(|v| want.contains(v))),
            other => panic!("the evaluator does not know the operator {other}"),
        }
    }

    /// The `Sid` of the statement that allows `req`, if one does.
    pub fn allowed_by(policy: &Value, req: &Request) -> Option<String> {
        policy["Statement"]
            .as_array()
            .expect("statements")
            .iter()
            .find(|s| {
                assert_eq!(s["Effect"], "Allow");
                strings(&s["Action"]).iter().any(|a| glob(a, req.action))
                    && strings(&s["Resource"])
                        .iter()
                        .any(|r| glob(r, &req.resource))
                    && s.get("Condition").is_none_or(|c| {
                        c.as_object().expect("conditions").iter().all(|(op, keys)| {
                            keys.as_object()
                                .expect("condition keys")
                                .iter()
                                .all(|(key, want)| condition_holds(op, key, &strings(want), req))
                        })
                    })
            })
            .map(|s| s["Sid"].as_str().unwrap_or_default().to_string())
    }

    #[test]
    fn globs_match_as_iam_matches() {
        assert!(glob(
            "arn:aws:ec2:*:*:instance/*",
            "arn:aws:ec2:us-west-2:1:instance/i-1"
        ));
        assert!(!glob(
            "arn:aws:ec2:*:*:instance/*",
            "arn:aws:ec2:us-west-2:1:volume/v-1"
        ));
        assert!(glob("*", ""));
        assert!(glob("a?c", "abc") && !glob("a?c", "ac"));
    }
}

/// The tags of one resource type in an EC2 query request's
/// `TagSpecification.N` (or `LaunchTemplateData.TagSpecification.N`).
fn tag_spec(body: &str, prefix: &str, resource_type: &str) -> BTreeMap<String, String> {
    let params: BTreeMap<String, String> = body
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (urlencode_decode(k), urlencode_decode(v)))
        .collect();
    for n in 1.. {
        let Some(rt) = params.get(&format!("{prefix}.{n}.ResourceType")) else {
            break;
        };
        if rt != resource_type {
            continue;
        }
        let mut tags = BTreeMap::new();
        for t in 1.. {
            let Some(k) = params.get(&format!("{prefix}.{n}.Tag.{t}.Key")) else {
                break;
            };
            let v = params
                .get(&format!("{prefix}.{n}.Tag.{t}.Value"))
                .cloned()
                .unwrap_or_default();
            tags.insert(k.clone(), v);
        }
        return tags;
    }
    panic!("no {prefix} for {resource_type} in {body}")
}

fn urlencode_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).expect("hex"));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).expect("UTF-8")
}

/// `deploy/iam-policy.json`, scoped as Karpenter's controller policy, lets
/// dovetail do exactly what it does: the requests are built from what
/// dovetail sends (CreateFleet's and CreateLaunchTemplate's tags, through
/// the proxy) and the resources from what it made (their tags, from EC2).
/// Writes are scoped by request tags at creation and resource tags after,
/// reads by region; an instance without the NodePool tag cannot be
/// terminated, nor another cluster's.
#[test]
fn the_iam_policy_scopes_every_write_to_what_dovetail_tags() {
    use iam_eval::{Request, allowed_by};
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "us-west-2", "scoped").await;
        let aws = env.provider(&proxy.endpoint(), env.config()).await;
        let class = env.resolved(&aws).await;
        let instance = aws
            .create(&claim("scoped-a", &["m5.large"]), &class, &BTreeSet::new())
            .await
            .expect("launches")
            .instance;
        let account = "111122223333";
        let policy: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(root().join("deploy/iam-policy.json"))
                .expect("policy")
                .replace("CLUSTER_NAME", &env.cluster)
                .replace("REGION", &env.region)
                .replace("ACCOUNT_ID", account)
                .replace("NODE_ROLE_NAME", "KarpenterNodeRole-scoped")
                .replace("INTERRUPTION_QUEUE_NAME", "scoped"),
        )
        .expect("JSON");
        let arn =
            |kind: &str, id: &str| format!("arn:aws:ec2:{}:{account}:{kind}/{id}", env.region);
        let allowed = |req: &Request| allowed_by(&policy, req);

        // Creation: the request tags dovetail sends.
        let fleet = proxy.bodies("CreateFleet").remove(0);
        for (resource, kind) in [
            ("instance", "instance"),
            ("volume", "volume"),
            ("fleet", "fleet"),
        ] {
            let tags = tag_spec(&fleet, "TagSpecification", resource);
            let req = Request::new("ec2:CreateFleet", arn(kind, "*")).request_tags(&tags);
            assert!(
                allowed(&req).is_some(),
                "CreateFleet of a {resource}: {tags:?}"
            );
            let req = Request::new("ec2:CreateTags", arn(kind, "x"))
                .request_tags(&tags)
                .with("ec2:CreateAction", &["CreateFleet"]);
            assert!(allowed(&req).is_some(), "tagging a new {resource}");
        }
        let template = proxy.bodies("CreateLaunchTemplate").remove(0);
        let lt_tags = tag_spec(&template, "TagSpecification", "launch-template");
        let req = Request::new("ec2:CreateLaunchTemplate", arn("launch-template", "*"))
            .request_tags(&lt_tags);
        assert!(allowed(&req).is_some(), "CreateLaunchTemplate: {lt_tags:?}");
        let eni_tags = tag_spec(
            &template,
            "LaunchTemplateData.TagSpecification",
            "network-interface",
        );
        let req =
            Request::new("ec2:RunInstances", arn("network-interface", "*")).request_tags(&eni_tags);
        assert!(
            allowed(&req).is_some(),
            "the template's interfaces: {eni_tags:?}"
        );
        // A launch without the NodePool tag is refused.
        let mut untagged = tag_spec(&fleet, "TagSpecification", "instance");
        untagged.remove("karpenter.sh/nodepool");
        let req = Request::new("ec2:CreateFleet", arn("instance", "*")).request_tags(&untagged);
        assert_eq!(allowed(&req), None);

        // Launching from the template dovetail made, and deleting it.
        let made = env
            .ec2
            .describe_launch_templates()
            .launch_template_names(env.launch_templates().await.remove(0))
            .send()
            .await
            .expect("DescribeLaunchTemplates");
        let template_tags: BTreeMap<String, String> = made.launch_templates()[0]
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
            .collect();
        for action in ["ec2:RunInstances", "ec2:DeleteLaunchTemplate"] {
            let req =
                Request::new(action, arn("launch-template", "lt-1")).resource_tags(&template_tags);
            assert!(allowed(&req).is_some(), "{action} on {template_tags:?}");
        }
        assert!(
            allowed(&Request::new(
                "ec2:RunInstances",
                format!("arn:aws:ec2:{}::image/ami-1", env.region)
            ))
            .is_some()
        );

        // Terminating: the instance as dovetail tagged it, yes; without
        // the NodePool tag, or of another cluster, no.
        let tags = env.tags(&instance.id).await;
        let terminate = |tags: &BTreeMap<String, String>| {
            allowed(
                &Request::new("ec2:TerminateInstances", arn("instance", &instance.id))
                    .resource_tags(tags),
            )
        };
        assert_eq!(terminate(&tags).as_deref(), Some("DovetailDeleteOwned"));
        let mut no_pool = tags.clone();
        no_pool.remove("karpenter.sh/nodepool");
        assert_eq!(
            terminate(&no_pool),
            None,
            "an instance without the nodepool tag"
        );
        let mut other = no_pool.clone();
        other.remove("kubernetes.io/cluster/scoped");
        other.insert("kubernetes.io/cluster/other".into(), "owned".into());
        other.insert("karpenter.sh/nodepool".into(), "default".into());
        assert_eq!(terminate(&other), None, "another cluster's instance");

        // Instance profiles are read in this account only (Karpenter's
        // AllowInstanceProfileReadActions); listing them is unscoped.
        let profile = format!("arn:aws:iam::{account}:instance-profile/dovetail_scoped_1");
        assert_eq!(
            allowed(&Request::new("iam:GetInstanceProfile", profile)).as_deref(),
            Some("DovetailInstanceProfileRead")
        );
        assert_eq!(
            allowed(&Request::new(
                "iam:GetInstanceProfile",
                "arn:aws:iam::999988887777:instance-profile/other".to_string()
            )),
            None
        );
        assert!(allowed(&Request::new("iam:ListInstanceProfiles", "*".to_string())).is_some());

        // Tagging an instance later: only the keys dovetail adds.
        let name = BTreeMap::from([("Name".to_string(), "ip-10-0-0-1".to_string())]);
        let req = Request::new("ec2:CreateTags", arn("instance", &instance.id))
            .resource_tags(&tags)
            .request_tags(&name);
        assert!(allowed(&req).is_some());
        let team = BTreeMap::from([("team".to_string(), "x".to_string())]);
        let req = Request::new("ec2:CreateTags", arn("instance", &instance.id))
            .resource_tags(&tags)
            .request_tags(&team);
        assert_eq!(allowed(&req), None);

        // Reads only in the cluster's region.
        let read = |region: &str| {
            allowed(
                &Request::new("ec2:DescribeInstances", "*").with("aws:RequestedRegion", &[region]),
            )
        };
        assert!(read(&env.region).is_some());
        assert_eq!(read("eu-west-1"), None);

        // Cluster discovery: this cluster only, as Karpenter's policy.
        let cluster_arn =
            |name: &str| format!("arn:aws:eks:{}:{account}:cluster/{name}", env.region);
        let describe =
            |name: &str| allowed(&Request::new("eks:DescribeCluster", cluster_arn(name)));
        assert!(describe(&env.cluster).is_some());
        assert_eq!(describe("another"), None);

        // Instance profiles: created with dovetail's tags, changed only
        // when they carry them.
        let mut c = env.nodeclass();
        c.metadata.uid = Some("u1".into());
        let profile_tags =
            dovetail::cloud::aws::instanceprofile::profile_tags(&env.cluster, &env.region, &c);
        let profile =
            format!("arn:aws:iam::{account}:instance-profile/karpenter/us-west-2/scoped/u1/p");
        let req =
            Request::new("iam:CreateInstanceProfile", profile.clone()).request_tags(&profile_tags);
        assert!(allowed(&req).is_some(), "{profile_tags:?}");
        for action in [
            "iam:AddRoleToInstanceProfile",
            "iam:RemoveRoleFromInstanceProfile",
            "iam:DeleteInstanceProfile",
        ] {
            let req = Request::new(action, profile.clone()).resource_tags(&profile_tags);
            assert!(allowed(&req).is_some(), "{action}");
            let mut foreign = profile_tags.clone();
            foreign.insert("topology.kubernetes.io/region".into(), "eu-west-1".into());
            let req = Request::new(action, profile.clone()).resource_tags(&foreign);
            assert_eq!(allowed(&req), None, "{action} on another region's profile");
        }
        let pass = Request::new(
            "iam:PassRole",
            format!("arn:aws:iam::{account}:role/KarpenterNodeRole-scoped"),
        )
        .with("iam:PassedToService", &["ec2.amazonaws.com"]);
        assert!(allowed(&pass).is_some());
    });
}

/// `dovetail aws resolve` end to end against moto: the report holds what
/// the class really resolves to, a class that resolves to nothing names
/// its problems, and nothing is written to AWS.
#[test]
fn aws_resolve_reports_the_resolution_and_writes_nothing() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    let region = "eu-west-3";
    let cluster = "resolvecli";
    let env = rt.block_on(Env::new(&moto.endpoint(), region, cluster));
    let dir = tempfile::tempdir().expect("temp dir");
    let class_path = dir.path().join("class.yaml");
    let yaml = format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: cli}}\n\
         spec:\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n  role: KarpenterNodeRole-{cluster}\n  \
         subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: {cluster}}}}}]\n  \
         securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: {cluster}}}}}]\n  \
         tags: {{team: platform}}\n"
    );
    std::fs::write(&class_path, &yaml).expect("write");
    let prices = root().join("tests/fixtures/aws/prices.json");
    let run = |class: &Path, extra: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_dovetail"))
            .args(["aws", "resolve", "--nodeclass"])
            .arg(class)
            .args(["--cluster-name", cluster, "--kubernetes-version", K8S])
            .args(["--ssm-parameter-root", env.ssm_root.as_str()])
            .args(["--service-cidr", "10.100.0.0/16"])
            .args(["--cluster-endpoint", "https://example.eks.amazonaws.com"])
            .args([
                "--cluster-ca-bundle",
                "Q0E=",
                "--isolated-vpc",
                "--pricing-file",
            ])
            .arg(&prices)
            .args(extra)
            .envs(moto.sdk_env(region))
            .output()
            .expect("runs dovetail");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8(output.stdout).expect("UTF-8"),
            String::from_utf8(output.stderr).expect("UTF-8"),
        )
    };

    // JSON: the real ids, each image's term, the subnets' free addresses.
    let (code, stdout, stderr) = run(&class_path, &["--instance-type", "m5.large", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}\n{stdout}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["nodeclass"], "cli");
    assert_eq!(doc["ready"], true);
    let amis = doc["amis"].as_array().expect("amis");
    assert_eq!(amis.len(), 1, "{amis:?}");
    assert_eq!(amis[0]["id"], env.images[0].as_str());
    assert_eq!(amis[0]["architecture"], "amd64");
    assert_eq!(amis[0]["variant"], "standard");
    assert_eq!(amis[0]["term"], "amiSelectorTerms[0] (alias al2023@latest)");
    let mut subnets: Vec<(String, String)> = doc["subnets"]
        .as_array()
        .expect("subnets")
        .iter()
        .map(|s| {
            assert!(s["free_addresses"].as_i64().unwrap_or(0) > 0, "{s}");
            (
                s["id"].as_str().unwrap_or_default().to_string(),
                s["zone"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    subnets.sort();
    let mut want = env.subnets.clone();
    want.sort();
    assert_eq!(subnets, want);
    assert_eq!(doc["security_groups"][0]["id"], env.security_group.as_str());
    let profile = doc["instance_profile"].as_str().expect("a profile");
    assert!(profile.starts_with(&format!("{cluster}_")), "{profile}");
    let conditions: Vec<(String, String)> = doc["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or_default().to_string(),
                c["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for t in [
        "AMIsReady",
        "SubnetsReady",
        "SecurityGroupsReady",
        "InstanceProfileReady",
        "ValidationSucceeded",
        "PlacementGroupReady",
        "Ready",
    ] {
        assert!(
            conditions.contains(&(t.to_string(), "True".to_string())),
            "{t}: {conditions:?}"
        );
    }
    let notes = doc["notes"].to_string();
    assert!(notes.contains("would create instance profile"), "{notes}");
    assert!(notes.contains("would create launch template"), "{notes}");
    // The launch of m5.large: the launch path's template and user data.
    let launch = &doc["launches"][0];
    assert_eq!(launch["instance_type"], "m5.large");
    assert_eq!(
        launch["launch_template"]["image_id"],
        env.images[0].as_str()
    );
    assert_eq!(
        launch["launch_template"]["security_group_ids"][0],
        env.security_group.as_str()
    );
    assert_eq!(launch["launch_template"]["instance_profile"], profile);
    assert_eq!(launch["launch_template"]["tags"]["team"], "platform");
    // And the LaunchTemplateData exactly as CreateLaunchTemplate sends it.
    let data = &launch["launch_template_data"];
    assert_eq!(data["ImageId"], env.images[0].as_str());
    assert_eq!(data["SecurityGroupIds"][0], env.security_group.as_str());
    assert_eq!(data["IamInstanceProfile"]["Name"], profile);
    assert_eq!(data["MetadataOptions"]["InstanceMetadataTags"], "disabled");
    assert_eq!(data["MetadataOptions"]["HttpTokens"], "required");
    let user_data = launch["user_data"].as_str().expect("user data");
    assert!(user_data.contains(r#""kind": "NodeConfig""#), "{user_data}");
    assert!(
        user_data.contains(&format!(r#""name": "{cluster}""#)),
        "{user_data}"
    );
    assert!(
        launch["launch_template_name"]
            .as_str()
            .is_some_and(|n| n.starts_with(&format!("dovetail/{cluster}/"))),
        "{launch}"
    );

    // Text: the same ids, readably.
    let (code, text, stderr) = run(&class_path, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(text.contains("Ready: True"), "{text}");
    assert!(text.contains(env.images[0].as_str()), "{text}");
    assert!(
        text.contains("<- amiSelectorTerms[0] (alias al2023@latest)"),
        "{text}"
    );
    for (id, zone) in &env.subnets {
        assert!(
            text.contains(id.as_str()) && text.contains(zone.as_str()),
            "{text}"
        );
    }
    assert!(text.contains(env.security_group.as_str()), "{text}");

    // Nothing was written: no instance profile, no launch template.
    rt.block_on(async {
        let sdk = moto::sdk_config(&moto.endpoint(), region).await;
        let profiles = aws_sdk_iam::Client::new(&sdk)
            .list_instance_profiles()
            .send()
            .await
            .expect("ListInstanceProfiles");
        assert!(
            !profiles
                .instance_profiles()
                .iter()
                .any(|p| p.instance_profile_name() == profile),
            "an instance profile was created"
        );
        let templates = env
            .ec2
            .describe_launch_templates()
            .send()
            .await
            .expect("DescribeLaunchTemplates");
        assert!(
            !templates.launch_templates().iter().any(|t| t
                .launch_template_name()
                .is_some_and(|n| n.starts_with(&format!("dovetail/{cluster}/")))),
            "a launch template was created"
        );
    });

    // A class that resolves to nothing names each problem, and exits 1.
    let lost_path = dir.path().join("lost.yaml");
    std::fs::write(
        &lost_path,
        yaml.replace(
            &format!("karpenter.sh/discovery: {cluster}}}}}]\n  securityGroup"),
            "karpenter.sh/discovery: nobody}}]\n  securityGroup",
        )
        .replace("al2023@latest", "bottlerocket@latest"),
    )
    .expect("write");
    let (code, stdout, stderr) = run(&lost_path, &["-o", "json"]);
    assert_eq!(code, 1, "{stderr}\n{stdout}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(doc["ready"], false);
    let problems: Vec<(String, String)> = doc["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .map(|p| {
            (
                p["condition"].as_str().unwrap_or_default().to_string(),
                p["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for (condition, reason) in [
        ("SubnetsReady", "SubnetsNotFound"),
        ("AMIsReady", "AMINotFound"),
        ("ValidationSucceeded", "DependenciesNotReady"),
    ] {
        assert!(
            problems.contains(&(condition.to_string(), reason.to_string())),
            "{condition}: {problems:?}"
        );
    }
    let (code, text, _) = run(&lost_path, &[]);
    assert_eq!(code, 1);
    assert!(text.contains("Ready: False"), "{text}");
    assert!(
        text.contains("SubnetsReady (SubnetsNotFound): SubnetSelector did not match any Subnets"),
        "{text}"
    );
    assert!(
        text.contains(
            "UnhealthyDependents: AMIsReady=False, SubnetsReady=False, ValidationSucceeded=False"
        ),
        "{text}"
    );

    // An instance type the region does not offer is bad input.
    let (code, _, stderr) = run(&class_path, &["--instance-type", "m99.huge"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("m99.huge"), "{stderr}");
}

#[test]
fn aws_resolve_rejects_bad_input_before_calling_aws() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = |path: &Path| {
        crate::support::dovetail(&[
            "aws",
            "resolve",
            "--cluster-name",
            "c",
            "--nodeclass",
            path.to_str().expect("UTF-8 path"),
        ])
    };
    let out = run(Path::new("no/such.yaml"));
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("no/such.yaml"), "{}", out.stderr);
    assert!(out.stderr.contains("hint: "), "{}", out.stderr);

    let pool = dir.path().join("pool.yaml");
    std::fs::write(
        &pool,
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\n",
    )
    .expect("write");
    let out = run(&pool);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("pool.yaml:2: kind: NodePool is not an EC2NodeClass"),
        "{}",
        out.stderr
    );

    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "kind: EC2NodeClass\nspec: [\n").expect("write");
    let out = run(&broken);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("broken.yaml"), "{}", out.stderr);
    assert!(out.stderr.contains("line"), "{}", out.stderr);

    let field = dir.path().join("field.yaml");
    std::fs::write(
        &field,
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: x}\nspec:\n  amiSelectorTerms: 3\n",
    )
    .expect("write");
    let out = run(&field);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("field.yaml"), "{}", out.stderr);
    assert!(
        out.stderr.contains("amiSelectorTerms") || out.stderr.contains("line 5"),
        "{}",
        out.stderr
    );
}

/// `ValidationSucceeded`: the launch's authorization dry-runs through the
/// fault proxy (moto honours `DryRun` and answers `DryRunOperation`; the
/// proxy denies what a policy would), and the decision is cached.
#[test]
fn validation_dry_runs_the_launch_and_names_the_denied_action() {
    let Some(moto) = moto::server() else { return };
    let rt = runtime();
    rt.block_on(async {
        let proxy = aws_proxy::start(moto.addr).await;
        let env = Env::new(&proxy.endpoint(), "ap-south-1", "validate").await;
        let aws = env.provider(&proxy.endpoint(), env.config()).await;
        let class = env.nodeclass();
        let r = aws.resolve_node_class(&class).await.expect("resolves");
        assert!(r.is_ready(), "{:?}", r.problems);
        assert_eq!(proxy.dry_runs("CreateLaunchTemplate"), 1);
        assert_eq!(proxy.dry_runs("CreateFleet"), 1);
        assert_eq!(proxy.dry_runs("RunInstances"), 1);
        // The fleet dry-run carries the launch's tags.
        let body = proxy
            .seen
            .lock()
            .unwrap()
            .iter()
            .find(|s| s.action == "CreateFleet" && s.dry_run)
            .map(|s| s.body.clone())
            .expect("a fleet dry-run");
        assert!(body.contains("team"), "{body}");
        assert!(body.contains("karpenter.sh%2Fnodepool"), "{body}");
        // Decided: the next resolution does not dry-run again.
        let again = aws.resolve_node_class(&class).await.expect("resolves");
        assert!(again.is_ready());
        assert_eq!(proxy.dry_runs("CreateFleet"), 1);

        // A policy without CreateFleet: ValidationSucceeded is False and
        // names it, Ready names ValidationSucceeded.
        proxy.faults.lock().unwrap().deny.insert("CreateFleet".to_string());
        let mut denied = class.clone();
        denied.metadata.name = Some("denied".into());
        let r = aws.resolve_node_class(&denied).await.expect("resolves");
        assert!(!r.is_ready());
        let p = &r.problems[0];
        assert_eq!(p.condition.as_str(), "ValidationSucceeded");
        assert_eq!(p.reason, "CreateFleetAuthCheckFailed");
        assert!(
            p.message.starts_with("Controller isn't authorized to call ec2:CreateFleet: UnauthorizedOperation"),
            "{}",
            p.message
        );
        let ready = r.conditions().into_iter().find(|c| c.type_ == "Ready").expect("Ready");
        assert_eq!(ready.message, "ValidationSucceeded=False");
        // A launch from a class whose status says so is refused.
        let mut status_denied = with_status(denied.clone(), &r);
        let status = status_denied.status.get_or_insert_with(Default::default);
        status.conditions = Some(
            r.conditions()
                .into_iter()
                .map(|c| dovetail::api::common::Condition {
                    last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(SystemClock.now()),
                    message: Some(c.message),
                    observed_generation: None,
                    reason: Some(c.reason),
                    status: if c.status {
                        dovetail::api::common::ConditionStatus::True
                    } else {
                        dovetail::api::common::ConditionStatus::False
                    },
                    type_: c.type_.to_string(),
                })
                .collect(),
        );
        let err = aws
            .create(&claim("denied-1", &["m5.large"]), &status_denied, &BTreeSet::new())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, CloudError::NodeClassNotReady { reason, .. } if reason.contains("ec2:CreateFleet")),
            "{err}"
        );

        // Restricted tags fail before any call.
        let before = proxy.dry_runs("CreateLaunchTemplate");
        let mut tagged = class.clone();
        tagged.metadata.name = Some("tagged".into());
        tagged
            .spec
            .tags
            .get_or_insert_with(BTreeMap::new)
            .insert("karpenter.sh/nodepool".into(), "x".into());
        let r = aws.resolve_node_class(&tagged).await.expect("resolves");
        assert_eq!(r.problems[0].reason, "TagValidationFailed");
        assert_eq!(proxy.dry_runs("CreateLaunchTemplate"), before);
    });
}
