//! The simulated EC2's images, subnets and security groups, and how an
//! EC2NodeClass's selector terms resolve against them.
//!
//! # Images
//!
//! Each AMI family of the reference (`al2023`, `al2`, `bottlerocket`,
//! `windows2019`, `windows2022`, `windows2025`) has a list of releases,
//! oldest first; every family starts with one release,
//! [`INITIAL_RELEASE`]. A release is published for every Kubernetes version
//! at once, as EKS publishes its optimized AMIs, so an alias resolves to:
//! - `family@latest`: the newest release for the cluster's Kubernetes
//!   version;
//! - `family@<version>` (pinned): that release for the cluster's version.
//!   The simulation keeps no history, so every pinned version resolves.
//!
//! Each resolution yields one image per variant of the family, with the
//! requirements the reference gives it (`al2023`: standard, nvidia and
//! neuron; `al2` and `bottlerocket`: standard and nvidia; Windows: standard
//! on amd64 only). Image ids are `ami-` and 17 hex digits of a hash of
//! family, Kubernetes version, release, architecture and variant, so they
//! are the same on every run and change when any of these does. Terms by
//! `id` resolve to that image (amd64 unless `cloud.images` says otherwise);
//! terms by `name` or `tags` select among the scenario's `cloud.images`.
//!
//! # Subnets and security groups
//!
//! Without `cloud.subnets`, the VPC has one subnet per zone and every
//! subnet selector term selects all of them (the default VPC is assumed to
//! be tagged as the node classes expect). Likewise without
//! `cloud.securityGroups` there is one security group that every term
//! selects. With them, terms select by `id`, `name` and `tags` exactly as
//! in EC2 (every tag of a term must match; `*` matches any value; terms
//! are ORed).

use std::collections::BTreeMap;

use crate::api::ec2nodeclass::{
    Ami, AmiSelectorTerm, EC2NodeClass, NodeSelectorRequirement, SecurityGroup, Subnet,
};
use crate::cloud::aws::placement::PlacementGroup;
use crate::cloud::select::variant_requirements;
use crate::cloud::{NodeClassCondition, NodeClassResolution, reasons};
use crate::model::labels::ARCH;

/// The release every family has at the start of a simulation.
pub const INITIAL_RELEASE: &str = "v20251201";
/// The Kubernetes version of the simulated cluster unless configured.
pub const DEFAULT_KUBERNETES_VERSION: &str = "1.34";
/// The instance profile every node class gets when it names a role.
const PROFILE_PREFIX: &str = "dovetail-sim-";

/// What an AMI alias (`al2023@latest`, `al2023@v20251201`) resolved to in
/// the cluster a simulation starts from: an EC2NodeClass's `status.amis`
/// in a snapshot of a live cluster, whose image ids the simulated EC2's own
/// cannot reproduce. While the cluster's Kubernetes version and the
/// family's releases are those of the start, the alias resolves to these
/// images, and so does a pin to `release` (the release the images carry in
/// their names); so the nodes of an unchanged node class do not drift, and
/// those of a class pinned to another release do.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedAlias {
    /// `family@version` as written in the term.
    pub alias: String,
    /// The release the images belong to, when their names tell it.
    pub release: Option<String>,
    pub amis: Vec<Ami>,
}

/// An image registered in the simulated account (`cloud.images`), for
/// `amiSelectorTerms` by id, name or tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimImage {
    pub id: String,
    pub name: String,
    /// `amd64` or `arm64`.
    pub arch: String,
    pub tags: BTreeMap<String, String>,
}

/// A subnet of the simulated VPC (`cloud.subnets`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimSubnet {
    pub id: String,
    pub zone: String,
    pub tags: BTreeMap<String, String>,
}

/// A security group of the simulated VPC (`cloud.securityGroups`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimSecurityGroup {
    pub id: String,
    pub name: String,
    pub tags: BTreeMap<String, String>,
}

/// The account's network and images, and the cluster's version: what node
/// classes resolve against. Mutable during a run (a published image, a
/// cluster upgrade).
#[derive(Debug, Clone, PartialEq)]
pub struct Account {
    pub kubernetes_version: String,
    /// Releases per AMI family (`al2023`, ...), oldest first.
    pub releases: BTreeMap<String, Vec<String>>,
    pub images: Vec<SimImage>,
    /// `None`: the default VPC, whose subnets every term selects.
    pub subnets: Option<Vec<SimSubnet>>,
    pub security_groups: Option<Vec<SimSecurityGroup>>,
    /// The account's placement groups (all available).
    pub placement_groups: Vec<PlacementGroup>,
    /// What aliases resolved to at the start ([`ObservedAlias`]).
    pub observed: Vec<ObservedAlias>,
    /// The Kubernetes version at the start, for which `observed` holds.
    observed_version: String,
    /// One subnet per zone for the default VPC.
    default_subnets: Vec<SimSubnet>,
}

/// The families the reference knows, by alias name.
pub const FAMILIES: [&str; 6] = [
    "al2023",
    "al2",
    "bottlerocket",
    "windows2019",
    "windows2022",
    "windows2025",
];

impl Account {
    /// The default account for `zones`: every family at
    /// [`INITIAL_RELEASE`], the default VPC, no custom images.
    pub fn new(zones: &[String], kubernetes_version: &str) -> Self {
        Account {
            kubernetes_version: kubernetes_version.to_string(),
            releases: FAMILIES
                .iter()
                .map(|f| (f.to_string(), vec![INITIAL_RELEASE.to_string()]))
                .collect(),
            images: Vec::new(),
            subnets: None,
            security_groups: None,
            placement_groups: Vec::new(),
            observed: Vec::new(),
            observed_version: kubernetes_version.to_string(),
            default_subnets: zones
                .iter()
                .map(|z| SimSubnet {
                    id: format!("subnet-{}", hex17(&["subnet", z])),
                    zone: z.clone(),
                    tags: BTreeMap::new(),
                })
                .collect(),
        }
    }

    /// The placement group `class` selects, if the account has it.
    pub fn placement_group(&self, class: &EC2NodeClass) -> Option<&PlacementGroup> {
        let selector = class.spec.placement_group_selector.as_ref()?;
        self.placement_groups
            .iter()
            .find(|g| g.selected_by(selector))
    }

    /// Publishes a new release of `family` (for every Kubernetes version);
    /// `family@latest` resolves to it from now on. Errors name an unknown
    /// family or a release that already exists.
    pub fn publish(&mut self, family: &str, release: &str) -> Result<(), String> {
        let releases = self.releases.get_mut(family).ok_or_else(|| {
            format!(
                "unknown AMI family {family:?}; one of {}",
                FAMILIES.join(", ")
            )
        })?;
        if releases.iter().any(|r| r == release) {
            return Err(format!("{family} release {release} is already published"));
        }
        releases.push(release.to_string());
        Ok(())
    }

    /// The newest release of a family.
    pub fn latest(&self, family: &str) -> Option<&str> {
        self.releases.get(family)?.last().map(String::as_str)
    }

    /// The images `family@version` resolved to at the start, while the
    /// cluster's version and the family's releases are unchanged.
    fn observed_for(&self, family: &str, version: &str) -> Option<&ObservedAlias> {
        let unchanged = self.kubernetes_version == self.observed_version
            && self.releases.get(family).is_some_and(|r| r.len() == 1);
        if !unchanged {
            return None;
        }
        self.observed.iter().find(|o| {
            let (f, v) = o
                .alias
                .split_once('@')
                .unwrap_or((o.alias.as_str(), "latest"));
            f.eq_ignore_ascii_case(family)
                && (v.eq_ignore_ascii_case(version) || o.release.as_deref() == Some(version))
        })
    }

    /// Resolves a node class's selector terms.
    pub fn resolve(&self, class: &EC2NodeClass) -> NodeClassResolution {
        let mut out = NodeClassResolution::default();
        let spec = &class.spec;
        for term in &spec.ami_selector_terms {
            self.resolve_ami_term(term, &mut out.amis);
        }
        out.amis.sort_by(|a, b| a.id.cmp(&b.id));
        out.amis.dedup_by(|a, b| a.id == b.id);
        if out.amis.is_empty() {
            out.problem(
                NodeClassCondition::AmisReady,
                reasons::AMI_NOT_FOUND,
                "AMISelector did not match any AMIs",
            );
        }
        let subnets = self.subnets.as_ref().unwrap_or(&self.default_subnets);
        let explicit = self.subnets.is_some();
        out.subnets = subnets
            .iter()
            .filter(|s| {
                !explicit
                    || spec.subnet_selector_terms.iter().any(|t| {
                        t.id.as_ref().is_none_or(|id| *id == s.id)
                            && tags_match(t.tags.as_ref(), &s.tags)
                    })
            })
            .map(|s| Subnet {
                id: s.id.clone(),
                zone: s.zone.clone(),
                zone_id: None,
            })
            .collect();
        if out.subnets.is_empty() {
            out.problem(
                NodeClassCondition::SubnetsReady,
                reasons::SUBNETS_NOT_FOUND,
                "SubnetSelector did not match any Subnets",
            );
        }
        let default_group = [SimSecurityGroup {
            id: format!("sg-{}", hex17(&["security-group", "default"])),
            name: "default".to_string(),
            tags: BTreeMap::new(),
        }];
        let explicit = self.security_groups.is_some();
        out.security_groups = self
            .security_groups
            .as_deref()
            .unwrap_or(&default_group)
            .iter()
            .filter(|g| {
                !explicit
                    || spec.security_group_selector_terms.iter().any(|t| {
                        t.id.as_ref().is_none_or(|id| *id == g.id)
                            && t.name.as_ref().is_none_or(|n| *n == g.name)
                            && tags_match(t.tags.as_ref(), &g.tags)
                    })
            })
            .map(|g| SecurityGroup {
                id: g.id.clone(),
                name: Some(g.name.clone()),
            })
            .collect();
        if out.security_groups.is_empty() {
            out.problem(
                NodeClassCondition::SecurityGroupsReady,
                reasons::SECURITY_GROUPS_NOT_FOUND,
                "SecurityGroupSelector did not match any SecurityGroups",
            );
        }
        out.instance_profile = spec
            .instance_profile
            .clone()
            .or_else(|| spec.role.as_ref().map(|r| format!("{PROFILE_PREFIX}{r}")));
        // A class that selects a group the account does not have launches
        // nothing, as in EC2.
        if let Some(selector) = &spec.placement_group_selector
            && self.placement_group(class).is_none()
        {
            out.problem(
                NodeClassCondition::PlacementGroupReady,
                reasons::PLACEMENT_GROUP_NOT_FOUND,
                format!(
                    "Placement group {:?} not found",
                    crate::cloud::aws::placement::selector_text(selector)
                ),
            );
        }
        // The simulated account allows every call: validation decides on
        // its dependencies and the tags alone.
        if let Some(p) = crate::cloud::aws::validation::precheck(class, &out) {
            out.problems.push(p);
        }
        out
    }

    fn resolve_ami_term(&self, term: &AmiSelectorTerm, out: &mut Vec<Ami>) {
        if let Some(alias) = &term.alias {
            let (fam, version) = alias.split_once('@').unwrap_or((alias.as_str(), "latest"));
            if let Some(seen) = self.observed_for(fam, version) {
                out.extend(seen.amis.iter().cloned());
                return;
            }
            let release = if version == "latest" {
                match self.latest(fam) {
                    Some(r) => r.to_string(),
                    None => return,
                }
            } else {
                version.to_string()
            };
            for (arch, variant) in variants(fam) {
                out.push(Ami {
                    deprecated: None,
                    id: format!(
                        "ami-{}",
                        hex17(&[fam, &self.kubernetes_version, &release, arch, variant])
                    ),
                    name: Some(format!(
                        "{fam}-{variant}-{arch}-k8s{}-{release}",
                        self.kubernetes_version
                    )),
                    requirements: variant_requirements(arch, variant),
                });
            }
            return;
        }
        if let Some(id) = &term.id {
            let arch = self
                .images
                .iter()
                .find(|i| &i.id == id)
                .map_or("amd64", |i| i.arch.as_str());
            out.push(custom(id, None, arch));
            return;
        }
        for image in &self.images {
            let name_ok = term.name.as_ref().is_none_or(|n| glob(n, &image.name));
            let selects = (term.name.is_some() || term.tags.is_some())
                && name_ok
                && tags_match(term.tags.as_ref(), &image.tags);
            if selects {
                out.push(custom(&image.id, Some(&image.name), &image.arch));
            }
        }
    }
}

fn custom(id: &str, name: Option<&str>, arch: &str) -> Ami {
    Ami {
        deprecated: None,
        id: id.to_string(),
        name: name.map(str::to_string),
        requirements: vec![NodeSelectorRequirement {
            key: ARCH.to_string(),
            operator: "In".to_string(),
            values: Some(vec![arch.to_string()]),
        }],
    }
}

/// (architecture, variant) of each image a family publishes per release.
fn variants(family: &str) -> &'static [(&'static str, &'static str)] {
    match family {
        "al2023" => &[
            ("amd64", "standard"),
            ("arm64", "standard"),
            ("amd64", "nvidia"),
            ("arm64", "nvidia"),
            ("amd64", "neuron"),
        ],
        "al2" | "bottlerocket" => &[
            ("amd64", "standard"),
            ("arm64", "standard"),
            ("amd64", "nvidia"),
            ("arm64", "nvidia"),
        ],
        f if f.starts_with("windows") => &[("amd64", "standard")],
        _ => &[],
    }
}

/// Whether every tag of a selector term is on the object (`*` matches any
/// value); no tags select everything.
fn tags_match(want: Option<&BTreeMap<String, String>>, have: &BTreeMap<String, String>) -> bool {
    want.into_iter()
        .flatten()
        .all(|(k, v)| have.get(k).is_some_and(|h| v == "*" || h == v))
}

/// A name pattern with `*` wildcards, as EC2's name filters take.
fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let mut rest = name;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

/// 17 hex digits of a hash of `parts`, for resource ids.
fn hex17(parts: &[&str]) -> String {
    let joined = parts.join("/");
    let h = super::fmix64(super::fnv1a64(joined.bytes()));
    format!("{h:017x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zones() -> Vec<String> {
        vec!["us-east-1a".into(), "us-east-1b".into()]
    }

    fn class(alias: &str) -> EC2NodeClass {
        let mut c = EC2NodeClass::test("default");
        c.spec.ami_selector_terms = vec![AmiSelectorTerm {
            alias: Some(alias.into()),
            ..AmiSelectorTerm::default()
        }];
        c
    }

    #[test]
    fn latest_moves_with_a_release_and_an_upgrade_pinned_only_with_an_upgrade() {
        let mut account = Account::new(&zones(), "1.33");
        let latest = account.resolve(&class("al2023@latest"));
        assert!(latest.is_ready(), "{:?}", latest.problems);
        assert_eq!(latest.amis.len(), 5);
        let pinned = account.resolve(&class("al2023@v20251201"));
        assert_eq!(pinned.amis, latest.amis, "latest is the initial release");
        account.publish("al2023", "v20260110").unwrap();
        let newer = account.resolve(&class("al2023@latest"));
        assert!(newer.amis.iter().all(|a| !latest.amis.contains(a)));
        assert_eq!(
            account.resolve(&class("al2023@v20251201")).amis,
            pinned.amis
        );
        account.kubernetes_version = "1.34".into();
        assert_ne!(
            account.resolve(&class("al2023@v20251201")).amis,
            pinned.amis
        );
        assert!(account.publish("al2023", "v20260110").is_err());
        assert!(account.publish("ubuntu", "v1").is_err());
    }

    #[test]
    fn default_vpc_is_selected_by_any_term_and_explicit_subnets_by_their_tags() {
        let mut account = Account::new(&zones(), "1.34");
        let c = class("al2023@latest");
        let r = account.resolve(&c);
        assert_eq!(r.subnets.len(), 2);
        assert_eq!(r.security_groups.len(), 1);
        account.subnets = Some(vec![SimSubnet {
            id: "subnet-a".into(),
            zone: "us-east-1a".into(),
            tags: BTreeMap::from([("team".into(), "x".into())]),
        }]);
        let mut other = c.clone();
        other.spec.subnet_selector_terms[0].tags =
            Some(BTreeMap::from([("team".into(), "y".into())]));
        let r = account.resolve(&other);
        assert!(r.subnets.is_empty());
        assert_eq!(
            r.summary(),
            "SubnetsReady: SubnetSelector did not match any Subnets; ValidationSucceeded: Awaiting AMI, Instance Profile, Security Group, and Subnet resolution"
        );
        assert_eq!(r.problems[0].reason, "SubnetsNotFound");
        other.spec.subnet_selector_terms[0].tags =
            Some(BTreeMap::from([("team".into(), "*".into())]));
        assert_eq!(account.resolve(&other).subnets[0].id, "subnet-a");
    }

    #[test]
    fn names_match_with_wildcards() {
        assert!(glob("eks-*-1.34-*", "eks-node-1.34-v2"));
        assert!(!glob("eks-*-1.34-*", "eks-node-1.33-v2"));
        assert!(glob("exact", "exact"));
        assert!(glob("*", "anything"));
    }

    #[test]
    fn observed_aliases_resolve_as_the_live_cluster_did_until_a_release_or_upgrade() {
        let mut account = Account::new(&["us-east-1a".to_string()], "1.34");
        let live = vec![Ami {
            deprecated: None,
            id: "ami-live".into(),
            name: Some("amazon-eks-node-al2023-x86_64-standard-1.34-v20251120".into()),
            requirements: Vec::new(),
        }];
        account.observed = vec![ObservedAlias {
            alias: "al2023@latest".into(),
            release: Some("v20251120".into()),
            amis: live.clone(),
        }];
        let class = |alias: &str| -> EC2NodeClass {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                "metadata": {"name": "c"},
                "spec": {"amiSelectorTerms": [{"alias": alias}], "role": "r",
                    "subnetSelectorTerms": [{"id": "s"}], "securityGroupSelectorTerms": [{"id": "g"}]}
            }))
            .unwrap()
        };
        let ids = |a: &Account, alias: &str| -> Vec<String> {
            a.resolve(&class(alias))
                .amis
                .into_iter()
                .map(|a| a.id)
                .collect()
        };
        assert_eq!(ids(&account, "al2023@latest"), ["ami-live"]);
        assert_eq!(
            ids(&account, "al2023@v20251120"),
            ["ami-live"],
            "pinned to the live release"
        );
        assert!(!ids(&account, "al2023@v20250601").contains(&"ami-live".to_string()));
        let mut upgraded = account.clone();
        upgraded.kubernetes_version = "1.35".into();
        assert!(!ids(&upgraded, "al2023@latest").contains(&"ami-live".to_string()));
        account.publish("al2023", "v20260105").unwrap();
        assert!(!ids(&account, "al2023@latest").contains(&"ami-live".to_string()));
    }
}
