//! How an EC2NodeClass's selector terms resolve in EC2 and SSM.
//!
//! # Subnets and security groups
//! Each term is one DescribeSubnets / DescribeSecurityGroups call with its
//! fields as filters (`subnet-id`/`group-id`, `group-name`, `tag:<key>`,
//! or `tag-key` for the value `*`); terms are ORed. Subnets are listed with
//! the most available IP addresses first (a launch takes the first of each
//! zone), security groups by id.
//!
//! # Images
//! - An alias `family@version` reads the family's public SSM parameters
//!   under the configured root (`--ssm-parameter-root`, default
//!   `/aws/service`) for the cluster's Kubernetes version, one per
//!   architecture and variant ([`alias_parameters`]); `latest` reads the
//!   `recommended`/`latest` parameter, a pinned version its own.
//!   Each image gets the requirements of its variant: the architecture,
//!   and GPUs (nvidia), Neuron devices (neuron), or neither (standard).
//! - `id`, `name` (EC2's `*` wildcards) with `owner`, and `tags` terms select
//!   through DescribeImages; `ssmParameter` through that parameter. Their
//!   images require their architecture only. Of several images with the
//!   same requirements, the newest that is not deprecated is kept (a
//!   deprecated one only when nothing else matches).
//!
//! An image whose architecture EC2 does not report is taken as x86_64.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::{Filter, Image};

use super::error::{AwsError, RetrySettings, call, paginate};
use crate::api::EC2NodeClass;
use crate::api::ec2nodeclass::{
    Ami, AmiSelectorTerm, NodeSelectorRequirement, SecurityGroup, Subnet,
};
use crate::clock::{Clock, SystemClock, Timestamp, parse_rfc3339};
use crate::cloud::select::variant_requirements;
use crate::cloud::{NodeClassCondition, NodeClassResolution, reasons};
use crate::model::labels::ARCH;

/// GetParameters takes at most this many names.
const SSM_BATCH: usize = 10;
/// Owners of `name` terms that name none.
const DEFAULT_OWNERS: [&str; 2] = ["self", "amazon"];

/// One image an alias resolves to: the SSM parameter, and what it is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasParameter {
    pub name: String,
    /// `amd64` or `arm64`.
    pub arch: &'static str,
    /// `standard`, `nvidia` or `neuron`.
    pub variant: &'static str,
}

/// The SSM parameters an alias reads: one per (architecture, variant) the
/// family publishes, under `root` for Kubernetes `k8s` (e.g. `1.34`).
/// `Err` names an unknown family.
pub fn alias_parameters(root: &str, k8s: &str, alias: &str) -> Result<Vec<AliasParameter>, String> {
    let (family, version) = alias.split_once('@').unwrap_or((alias, "latest"));
    let latest = version == "latest";
    let p = |name: String, arch, variant| AliasParameter {
        name,
        arch,
        variant,
    };
    let ec2_arch = |arch: &str| if arch == "amd64" { "x86_64" } else { "arm64" };
    Ok(match family {
        "al2023" => [
            ("amd64", "standard"),
            ("arm64", "standard"),
            ("amd64", "nvidia"),
            ("arm64", "nvidia"),
            ("amd64", "neuron"),
        ]
        .into_iter()
        .map(|(arch, variant)| {
            let a = ec2_arch(arch);
            let leaf = if latest {
                "recommended".to_string()
            } else {
                format!("amazon-eks-node-al2023-{a}-{variant}-{k8s}-{version}")
            };
            p(
                format!(
                    "{root}/eks/optimized-ami/{k8s}/amazon-linux-2023/{a}/{variant}/{leaf}/image_id"
                ),
                arch,
                variant,
            )
        })
        .collect(),
        "al2" => [
            ("amd64", "standard", "amazon-linux-2", ""),
            ("arm64", "standard", "amazon-linux-2-arm64", "arm64-"),
            ("amd64", "nvidia", "amazon-linux-2-gpu", "gpu-"),
            ("amd64", "neuron", "amazon-linux-2-gpu", "gpu-"),
        ]
        .into_iter()
        .map(|(arch, variant, dir, infix)| {
            let leaf = if latest {
                "recommended".to_string()
            } else {
                format!("amazon-eks-{infix}node-{k8s}-{version}")
            };
            p(
                format!("{root}/eks/optimized-ami/{k8s}/{dir}/{leaf}/image_id"),
                arch,
                variant,
            )
        })
        .collect(),
        "bottlerocket" => [
            ("amd64", "standard", ""),
            ("arm64", "standard", ""),
            ("amd64", "nvidia", "-nvidia"),
            ("arm64", "nvidia", "-nvidia"),
        ]
        .into_iter()
        .map(|(arch, variant, suffix)| {
            let leaf = if latest {
                "latest"
            } else {
                version.trim_start_matches('v')
            };
            p(
                format!(
                    "{root}/bottlerocket/aws-k8s-{k8s}{suffix}/{}/{leaf}/image_id",
                    ec2_arch(arch)
                ),
                arch,
                variant,
            )
        })
        .collect(),
        "windows2019" | "windows2022" | "windows2025" => {
            if !latest {
                return Err(format!(
                    "alias {alias:?}: Windows aliases take only the version latest"
                ));
            }
            let year = &family["windows".len()..];
            vec![p(
                format!(
                    "{root}/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id"
                ),
                "amd64",
                "standard",
            )]
        }
        _ => {
            return Err(format!(
                "alias {alias:?}: unknown AMI family {family:?} (al2023, al2, bottlerocket, windows2019, windows2022, windows2025)"
            ));
        }
    })
}

fn req(key: &str, operator: &str, values: Option<Vec<String>>) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values,
    }
}

/// The EC2 filters of a selector term's tags.
fn tag_filters(tags: Option<&BTreeMap<String, String>>) -> Vec<Filter> {
    tags.into_iter()
        .flatten()
        .map(|(k, v)| {
            if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            }
        })
        .collect()
}

fn filter(name: &str, value: &str) -> Filter {
    Filter::builder().name(name).values(value).build()
}

/// An image as DescribeImages reports it, reduced to what selection needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageFacts {
    pub id: String,
    pub name: Option<String>,
    pub arch: String,
    pub creation_date: String,
    pub deprecated: bool,
}

impl ImageFacts {
    fn from_sdk(image: &Image, now: Timestamp) -> Option<ImageFacts> {
        Some(ImageFacts {
            id: image.image_id()?.to_string(),
            name: image.name().map(str::to_string),
            arch: match image.architecture().map(|a| a.as_str()) {
                Some("arm64") => "arm64",
                _ => "amd64",
            }
            .to_string(),
            creation_date: image.creation_date().unwrap_or_default().to_string(),
            deprecated: image
                .deprecation_time()
                .and_then(|t| parse_rfc3339(t).ok())
                .is_some_and(|t| t <= now),
        })
    }
}

/// Of the images of term-based selection, the newest non-deprecated one
/// per architecture (a deprecated one only if that is all there is).
pub fn pick_newest(images: Vec<ImageFacts>) -> Vec<Ami> {
    let mut by_arch: BTreeMap<String, ImageFacts> = BTreeMap::new();
    for image in images {
        let better = |old: &ImageFacts| {
            (!image.deprecated, &image.creation_date, &image.id)
                > (!old.deprecated, &old.creation_date, &old.id)
        };
        match by_arch.get(&image.arch) {
            Some(old) if !better(old) => {}
            _ => {
                by_arch.insert(image.arch.clone(), image);
            }
        }
    }
    by_arch
        .into_values()
        .map(|i| Ami {
            deprecated: i.deprecated.then_some(true),
            requirements: vec![req(ARCH, "In", Some(vec![i.arch.clone()]))],
            id: i.id,
            name: i.name,
        })
        .collect()
}

/// A resolution with what a report shows beside it.
#[derive(Debug, Clone, Default)]
pub struct Traced {
    pub resolution: NodeClassResolution,
    /// Image id -> the selector term that chose it
    /// (`amiSelectorTerms[0] (alias al2023@latest)`).
    pub terms: BTreeMap<String, String>,
    /// Subnet id -> its available IPv4 addresses.
    pub free_addresses: BTreeMap<String, i32>,
}

/// Why an alias resolved to no image.
enum AliasProblem {
    /// An unknown family, or a version the family does not take
    /// (Karpenter's `UnsupportedAlias`).
    Unsupported(String),
    /// Nothing published for it (`AMINotFound`).
    NotFound(String),
}

/// A selector term as the report of `dovetail aws resolve` names it.
pub fn describe_term(term: &AmiSelectorTerm) -> String {
    let mut parts = Vec::new();
    if let Some(a) = &term.alias {
        parts.push(format!("alias {a}"));
    }
    if let Some(id) = &term.id {
        parts.push(format!("id {id}"));
    }
    if let Some(n) = &term.name {
        parts.push(format!("name {n}"));
    }
    if let Some(o) = &term.owner {
        parts.push(format!("owner {o}"));
    }
    if let Some(p) = &term.ssm_parameter {
        parts.push(format!("ssmParameter {p}"));
    }
    if let Some(tags) = &term.tags {
        let t: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        parts.push(format!("tags {}", t.join(",")));
    }
    parts.join(", ")
}

/// Resolves node classes against EC2 and SSM.
pub struct Resolver<'a> {
    pub ec2: &'a aws_sdk_ec2::Client,
    pub ssm: &'a aws_sdk_ssm::Client,
    pub retry: &'a RetrySettings,
    pub ssm_root: &'a str,
    pub kubernetes_version: Option<&'a str>,
    /// Where the subnets' free addresses are recorded (in-flight launches
    /// are counted against them: [`super::subnets`]).
    pub subnet_ips: Option<&'a std::sync::Mutex<super::subnets::SubnetIps>>,
}

impl Resolver<'_> {
    /// Resolves a node class; problems (nothing matched) are in the
    /// result, call failures are errors.
    pub async fn resolve(&self, class: &EC2NodeClass) -> Result<NodeClassResolution, AwsError> {
        Ok(self.resolve_traced(class).await?.resolution)
    }

    /// [`Self::resolve`], with what chose each image and each subnet's
    /// free addresses.
    pub async fn resolve_traced(&self, class: &EC2NodeClass) -> Result<Traced, AwsError> {
        let mut terms: BTreeMap<String, String> = BTreeMap::new();
        let mut out = NodeClassResolution::default();
        let spec = &class.spec;

        let mut subnets: BTreeMap<String, (i32, Subnet)> = BTreeMap::new();
        for term in &spec.subnet_selector_terms {
            let mut filters = tag_filters(term.tags.as_ref());
            if let Some(id) = &term.id {
                filters.push(filter("subnet-id", id));
            }
            let found = self.describe_subnets(filters).await?;
            if let Some(ips) = self.subnet_ips {
                let mut ips = ips
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                for s in &found {
                    if let Some(id) = s.subnet_id() {
                        ips.observe(id, i64::from(s.available_ip_address_count().unwrap_or(0)));
                    }
                }
            }
            for s in found {
                if let (Some(id), Some(zone)) = (s.subnet_id(), s.availability_zone()) {
                    subnets.insert(
                        id.to_string(),
                        (
                            s.available_ip_address_count().unwrap_or(0),
                            Subnet {
                                id: id.to_string(),
                                zone: zone.to_string(),
                                zone_id: s.availability_zone_id().map(str::to_string),
                            },
                        ),
                    );
                }
            }
        }
        let mut subnets: Vec<(i32, Subnet)> = subnets.into_values().collect();
        subnets.sort_by(|(a, sa), (b, sb)| b.cmp(a).then_with(|| sa.id.cmp(&sb.id)));
        let free_addresses: BTreeMap<String, i32> =
            subnets.iter().map(|(n, s)| (s.id.clone(), *n)).collect();
        out.subnets = subnets.into_iter().map(|(_, s)| s).collect();
        if out.subnets.is_empty() {
            out.problem(
                NodeClassCondition::SubnetsReady,
                reasons::SUBNETS_NOT_FOUND,
                "SubnetSelector did not match any Subnets",
            );
        }

        let mut groups: BTreeMap<String, SecurityGroup> = BTreeMap::new();
        for term in &spec.security_group_selector_terms {
            let mut filters = tag_filters(term.tags.as_ref());
            if let Some(id) = &term.id {
                filters.push(filter("group-id", id));
            }
            if let Some(name) = &term.name {
                filters.push(filter("group-name", name));
            }
            for g in self.describe_security_groups(filters).await? {
                if let Some(id) = g.group_id() {
                    groups.insert(
                        id.to_string(),
                        SecurityGroup {
                            id: id.to_string(),
                            name: g.group_name().map(str::to_string),
                        },
                    );
                }
            }
        }
        out.security_groups = groups.into_values().collect();
        if out.security_groups.is_empty() {
            out.problem(
                NodeClassCondition::SecurityGroupsReady,
                reasons::SECURITY_GROUPS_NOT_FOUND,
                "SecurityGroupSelector did not match any SecurityGroups",
            );
        }

        let mut term_images = Vec::new();
        let mut alias_problem = None;
        for (index, term) in spec.ami_selector_terms.iter().enumerate() {
            let chose = format!("amiSelectorTerms[{index}] ({})", describe_term(term));
            if let Some(alias) = &term.alias {
                match self.resolve_alias(alias).await? {
                    Ok(amis) => {
                        for a in &amis {
                            terms.entry(a.id.clone()).or_insert_with(|| chose.clone());
                        }
                        out.amis.extend(amis);
                    }
                    Err(problem) => alias_problem = Some(problem),
                }
            } else {
                for image in self.term_images(term).await? {
                    terms
                        .entry(image.id.clone())
                        .or_insert_with(|| chose.clone());
                    term_images.push(image);
                }
            }
        }
        out.amis.extend(pick_newest(term_images));
        if out.amis.is_empty() {
            match alias_problem {
                Some(AliasProblem::Unsupported(p)) => {
                    out.problem(NodeClassCondition::AmisReady, reasons::UNSUPPORTED_ALIAS, p)
                }
                Some(AliasProblem::NotFound(p)) => out.problem(
                    NodeClassCondition::AmisReady,
                    reasons::AMI_NOT_FOUND,
                    format!("AMISelector did not match any AMIs: {p}"),
                ),
                None => out.problem(
                    NodeClassCondition::AmisReady,
                    reasons::AMI_NOT_FOUND,
                    "AMISelector did not match any AMIs",
                ),
            }
        }
        // A role's profile is the provider's (`super::instanceprofile`).
        out.instance_profile = spec.instance_profile.clone();
        terms.retain(|id, _| out.amis.iter().any(|a| &a.id == id));
        Ok(Traced {
            resolution: out,
            terms,
            free_addresses,
        })
    }

    /// The images of an alias, or why there are none.
    async fn resolve_alias(&self, alias: &str) -> Result<Result<Vec<Ami>, AliasProblem>, AwsError> {
        let Some(k8s) = self.kubernetes_version else {
            return Ok(Err(AliasProblem::NotFound(format!(
                "alias {alias:?} needs the cluster's Kubernetes version, which is not configured"
            ))));
        };
        let params = match alias_parameters(self.ssm_root, k8s, alias) {
            Ok(p) => p,
            Err(e) => return Ok(Err(AliasProblem::Unsupported(e))),
        };
        let names: Vec<String> = params.iter().map(|p| p.name.clone()).collect();
        let values = self.get_parameters(&names).await?;
        let ids: BTreeSet<String> = values.values().cloned().collect();
        let images: BTreeMap<String, ImageFacts> = self
            .describe_images(vec![
                Filter::builder()
                    .name("image-id")
                    .set_values(Some(ids.into_iter().collect()))
                    .build(),
            ])
            .await?
            .into_iter()
            .map(|i| (i.id.clone(), i))
            .collect();
        let mut amis = Vec::new();
        for p in &params {
            let Some(image) = values.get(&p.name).and_then(|id| images.get(id)) else {
                continue;
            };
            amis.push(Ami {
                deprecated: image.deprecated.then_some(true),
                id: image.id.clone(),
                name: image.name.clone(),
                requirements: variant_requirements(p.arch, p.variant),
            });
        }
        if amis.is_empty() {
            let first = params.first().map(|p| p.name.as_str()).unwrap_or_default();
            return Ok(Err(AliasProblem::NotFound(format!(
                "alias {alias:?}: no image for amd64 or arm64 (SSM parameters such as {first})"
            ))));
        }
        Ok(Ok(amis))
    }

    /// The images a non-alias term selects.
    async fn term_images(&self, term: &AmiSelectorTerm) -> Result<Vec<ImageFacts>, AwsError> {
        if let Some(param) = &term.ssm_parameter {
            let values = self.get_parameters(std::slice::from_ref(param)).await?;
            let Some(id) = values.get(param) else {
                return Ok(Vec::new());
            };
            return self.describe_images(vec![filter("image-id", id)]).await;
        }
        let mut filters = tag_filters(term.tags.as_ref());
        if let Some(id) = &term.id {
            filters.push(filter("image-id", id));
        }
        if let Some(name) = &term.name {
            filters.push(filter("name", name));
        }
        // DescribeImages' Owners (account ids or `self`, `amazon`, ...),
        // as Karpenter passes them: EC2 has no filter that takes aliases.
        let owners: Vec<String> = match (&term.owner, &term.name) {
            (Some(o), _) => vec![o.clone()],
            (None, Some(_)) => DEFAULT_OWNERS.iter().map(|s| s.to_string()).collect(),
            (None, None) => Vec::new(),
        };
        self.describe_images_of(filters, owners).await
    }

    /// Parameter name -> value, for those that exist.
    async fn get_parameters(&self, names: &[String]) -> Result<BTreeMap<String, String>, AwsError> {
        let mut out = BTreeMap::new();
        for chunk in names.chunks(SSM_BATCH) {
            let ssm = self.ssm;
            let got = call(self.retry, "ssm:GetParameters", || {
                ssm.get_parameters().set_names(Some(chunk.to_vec())).send()
            })
            .await?;
            for p in got.parameters() {
                if let (Some(name), Some(value)) = (p.name(), p.value()) {
                    out.insert(name.to_string(), value.to_string());
                }
            }
        }
        Ok(out)
    }

    async fn describe_subnets(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<aws_sdk_ec2::types::Subnet>, AwsError> {
        let ec2 = self.ec2;
        paginate(
            self.retry,
            "ec2:DescribeSubnets",
            |token| {
                ec2.describe_subnets()
                    .set_filters(Some(filters.clone()))
                    .set_next_token(token)
                    .send()
            },
            |page| {
                (
                    page.subnets().to_vec(),
                    page.next_token().map(str::to_string),
                )
            },
        )
        .await
    }

    async fn describe_security_groups(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<aws_sdk_ec2::types::SecurityGroup>, AwsError> {
        let ec2 = self.ec2;
        paginate(
            self.retry,
            "ec2:DescribeSecurityGroups",
            |token| {
                ec2.describe_security_groups()
                    .set_filters(Some(filters.clone()))
                    .set_next_token(token)
                    .send()
            },
            |page| {
                (
                    page.security_groups().to_vec(),
                    page.next_token().map(str::to_string),
                )
            },
        )
        .await
    }

    async fn describe_images(&self, filters: Vec<Filter>) -> Result<Vec<ImageFacts>, AwsError> {
        self.describe_images_of(filters, Vec::new()).await
    }

    /// DescribeImages with `filters`, of `owners` (any when empty),
    /// deprecated images included: EKS deprecates its AMIs about two years
    /// after release, and a pinned version or an id still names one.
    async fn describe_images_of(
        &self,
        filters: Vec<Filter>,
        owners: Vec<String>,
    ) -> Result<Vec<ImageFacts>, AwsError> {
        // Deprecation is a fact about the wall clock.
        let now = SystemClock.now();
        let ec2 = self.ec2;
        let owners = (!owners.is_empty()).then_some(owners);
        paginate(
            self.retry,
            "ec2:DescribeImages",
            |token| {
                ec2.describe_images()
                    .set_filters(Some(filters.clone()))
                    .set_owners(owners.clone())
                    .include_deprecated(true)
                    .set_next_token(token)
                    .send()
            },
            |page| {
                let images = page
                    .images()
                    .iter()
                    .filter(|i| i.state().is_none_or(|s| s.as_str() == "available"))
                    .filter_map(|i| ImageFacts::from_sdk(i, now))
                    .collect();
                (images, page.next_token().map(str::to_string))
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_name_the_public_parameters() {
        let p = alias_parameters("/aws/service", "1.34", "al2023@latest").expect("known");
        assert_eq!(p.len(), 5);
        assert_eq!(
            p[0].name,
            "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/standard/recommended/image_id"
        );
        assert_eq!((p[1].arch, p[1].variant), ("arm64", "standard"));
        let pinned = alias_parameters("/t", "1.34", "al2023@v20250101").expect("known");
        assert_eq!(
            pinned[3].name,
            "/t/eks/optimized-ami/1.34/amazon-linux-2023/arm64/nvidia/amazon-eks-node-al2023-arm64-nvidia-1.34-v20250101/image_id"
        );
        let br = alias_parameters("/aws/service", "1.33", "bottlerocket@v1.40.0").expect("known");
        assert_eq!(
            br[2].name,
            "/aws/service/bottlerocket/aws-k8s-1.33-nvidia/x86_64/1.40.0/image_id"
        );
        let al2 = alias_parameters("/aws/service", "1.32", "al2@latest").expect("known");
        assert_eq!(
            al2[1].name,
            "/aws/service/eks/optimized-ami/1.32/amazon-linux-2-arm64/recommended/image_id"
        );
        let win = alias_parameters("/aws/service", "1.34", "windows2022@latest").expect("known");
        assert_eq!(
            win[0].name,
            "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.34/image_id"
        );
        assert!(alias_parameters("/aws/service", "1.34", "windows2022@v1").is_err());
        assert!(alias_parameters("/aws/service", "1.34", "ubuntu@latest").is_err());
    }

    #[test]
    fn term_images_keep_the_newest_non_deprecated_per_architecture() {
        let image = |id: &str, arch: &str, date: &str, deprecated: bool| ImageFacts {
            id: id.into(),
            name: Some(format!("img-{id}")),
            arch: arch.into(),
            creation_date: date.into(),
            deprecated,
        };
        let amis = pick_newest(vec![
            image("ami-1", "amd64", "2026-01-01T00:00:00.000Z", false),
            image("ami-2", "amd64", "2026-03-01T00:00:00.000Z", true),
            image("ami-3", "amd64", "2026-02-01T00:00:00.000Z", false),
            image("ami-4", "arm64", "2026-01-01T00:00:00.000Z", true),
        ]);
        let ids: Vec<&str> = amis.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["ami-3", "ami-4"]);
        assert_eq!(amis[1].deprecated, Some(true));
        assert_eq!(
            amis[0].requirements[0].values,
            Some(vec!["amd64".to_string()])
        );
    }

    #[test]
    fn variants_require_their_accelerators() {
        let std = variant_requirements("arm64", "standard");
        assert_eq!(std.len(), 3);
        assert_eq!(std[1].operator, "DoesNotExist");
        let gpu = variant_requirements("amd64", "nvidia");
        assert_eq!(gpu[1].key, "karpenter.k8s.aws/instance-gpu-count");
        assert_eq!(gpu[1].operator, "Exists");
    }
}
