//! What a launch sends to EC2, as pure values: the user data per AMI
//! family, the launch templates, the CreateFleet overrides, and how
//! CreateFleet's answer maps back to instances and refused offerings.
//!
//! # User data
//! - AL2023: a MIME multi-part document for nodeadm: the user's parts
//!   first (a `NodeConfig` or a shell script, or their own MIME parts),
//!   then dovetail's `NodeConfig` (cluster name, endpoint, certificate
//!   authority, service CIDR; the kubelet settings the node class sets;
//!   node labels and the registration taints). nodeadm merges them.
//! - Bottlerocket: the user's TOML with dovetail's `settings.kubernetes`
//!   keys set over it (cluster, labels and taints merged).
//! - AL2: the user's parts, then a script calling `/etc/eks/bootstrap.sh`.
//! - Windows: the user's script, then `Start-EKSBootstrap.ps1`.
//! - Custom: the user's user data unchanged.
//!
//! The kubelet settings go into user data only when the node class sets
//! them; otherwise the node's bootstrap computes the same defaults the
//! scheduler assumes (see [`super::instance_types`]). Every node registers
//! with the `karpenter.sh/unregistered:NoExecute` taint, which the
//! controller removes when it adopts the node.
//!
//! # Launch templates
//! One per distinct (image, user data, block devices, metadata options,
//! security groups, instance profile, monitoring, public IP), named
//! `dovetail/<cluster>/<16 hex digits of an FNV-1a hash of those>`, so
//! identical launches share one and a change makes a new one. Defaults:
//! IMDSv2 required with hop limit 1 (the node class's `metadataOptions`),
//! an encrypted 20Gi gp3 root volume (Bottlerocket: 4Gi root and a 20Gi
//! data volume; Windows: 50Gi).
//!
//! # CreateFleet
//! `Type=instant`, one launch template config per image, with an override
//! for every (instance type, zone) the NodeClaim allows whose type fits its
//! requests and has an image, through the first subnet of the zone (the
//! one with the most free addresses), cheapest first, at most
//! [`MAX_INSTANCE_TYPES`] types. Spot when the NodeClaim allows it and a
//! spot offering is left, with `price-capacity-optimized`; otherwise
//! on-demand with `lowest-price`. A NodeClaim a NodeOverlay priced
//! (`karpenter.sh/price-overlay-applied`) launches in its overlaid order
//! (`dovetail.dev/launch-priority`) with `capacity-optimized-prioritized`
//! and `prioritized`, as the reference does.
//!
//! # Capacity reservations
//! A NodeClaim that allows `reserved` and has a reserved offering left
//! launches reserved, before spot and on-demand (Karpenter's order): only
//! its reserved offerings are kept, of one kind (the cheapest's: ordinary
//! reservations before capacity blocks before interruptible ones; a
//! capacity block alone, as CreateFleet takes one), each through a launch
//! template targeting its reservation ([`super::reservations`]).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hasher;

use base64::Engine;
use serde_json::{Value, json};

use super::config::ClusterAccess;
use super::instance_types::{
    Family, LABEL_TENANCY, LABEL_ZONE_ID, TENANCY_DEDICATED, TENANCY_DEFAULT,
};
use super::placement::{LABEL_PLACEMENT_GROUP_PARTITION, PlacementGroup};
use super::reservations::{
    self, Availability, LABEL_RESERVATION_ID, LABEL_RESERVATION_INTERRUPTIBLE,
    LABEL_RESERVATION_TYPE,
};
use crate::api::ec2nodeclass::{
    Ami, BlockDevice, BlockDeviceMapping, CapacityReservation, ConnectionTracking, EnabledDisabled,
    HttpTokens, InstanceStorePolicy, InterfaceType, KubeletConfiguration, MetadataOptions,
    NetworkInterface, ReservationType, VolumeType,
};
use crate::api::{EC2NodeClass, NodeClaim, TAINT_UNREGISTERED};
use crate::cloud::select::{
    claim_requests, image_for, instance_constraints, launch_priority, offering_key,
    requirements_of, type_allowed,
};
use crate::cloud::{CloudError, NodeClassResolution, OfferingKey};
use crate::model::InstanceType;
use crate::model::labels::{CAPACITY_TYPE, NODEPOOL, ZONE, is_well_known};
use crate::model::quantity::PODS;

/// Elastic Fabric Adapter interfaces, as instance types advertise them.
pub const EFA: &str = "vpc.amazonaws.com/efa";

/// The reference's cap on instance types per CreateFleet call.
pub const MAX_INSTANCE_TYPES: usize = 60;
/// CreateFleet errors that mean an offering cannot be launched now
/// (Karpenter's unfulfillable-capacity codes but reserved capacity's).
pub const CAPACITY_ERRORS: [&str; 8] = [
    "InsufficientInstanceCapacity",
    super::reservations::RESERVATION_CAPACITY_EXCEEDED,
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "MaxFleetCountExceeded",
];
/// A subnet has no free address: it is skipped for a while, and a zone
/// whose subnets all are is skipped.
pub const SUBNET_FULL: &str = "InsufficientFreeAddressesInSubnet";
/// The account has no Spot service-linked role and the controller may not
/// create it: spot cannot launch until someone creates the role.
pub const SPOT_ROLE_MISSING: &str = "AuthFailure.ServiceLinkedRoleCreationNotPermitted";
/// Tags dovetail puts on what it creates.
pub const TAG_NODEPOOL: &str = "karpenter.sh/nodepool";
pub const TAG_NODECLAIM: &str = "karpenter.sh/nodeclaim";
pub const TAG_NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const TAG_EKS_CLUSTER: &str = "eks:eks-cluster-name";
/// On the instances of a CreateFleet for several NodeClaims, until each is
/// tagged with its own: the claims' names, comma-separated. A replica that
/// takes over after the launching one died between the fleet and the
/// tagging finds each claim's instance among them instead of launching
/// again.
pub const TAG_LAUNCH_BATCH: &str = "dovetail.dev/launch-batch";
/// The longest value EC2 takes for a tag, and so for a batch's names.
pub const TAG_VALUE_MAX: usize = 256;
/// On launch templates: the image they launch (for clean-up).
pub const TAG_IMAGE: &str = "dovetail.dev/image-id";
const MIME_BOUNDARY: &str = "//";

/// `kubernetes.io/cluster/<name>`, valued `owned`.
pub fn cluster_tag(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}

/// Whether the kubelet accepts `key` in `--node-labels`: it refuses keys
/// in the `kubernetes.io` and `k8s.io` domains (and their subdomains) but
/// for `kubelet.kubernetes.io` and `node.kubernetes.io`, and refuses to
/// start with one. Such labels (`node-role.kubernetes.io/worker`, which
/// `validate` accepts on a NodePool) reach the Node when its NodeClaim
/// registers it, as Karpenter sets them.
fn kubelet_may_set(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else {
        return true;
    };
    let under = |d: &str, root: &str| d == root || d.ends_with(&format!(".{root}"));
    if under(domain, "kubelet.kubernetes.io") || under(domain, "node.kubernetes.io") {
        return true;
    }
    !under(domain, "kubernetes.io") && !under(domain, "k8s.io")
}

/// A NodeClaim's labels and taints as the kubelet registers them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Registration {
    pub labels: BTreeMap<String, String>,
    /// `key=value:Effect` or `key:Effect`.
    pub taints: Vec<String>,
}

impl Registration {
    /// The labels the NodeClaim sets that are not facts of the instance
    /// type (those the node gets from the cloud), and its taints and
    /// startup taints, plus the unregistered taint.
    pub fn of(claim: &NodeClaim) -> Registration {
        let labels = claim
            .metadata
            .labels
            .iter()
            .flatten()
            .filter(|(k, _)| k.as_str() == NODEPOOL || !is_well_known(k))
            .filter(|(k, _)| kubelet_may_set(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut taints = vec![format!("{TAINT_UNREGISTERED}:NoExecute")];
        for t in claim
            .spec
            .taints
            .iter()
            .flatten()
            .chain(claim.spec.startup_taints.iter().flatten())
        {
            let s = match &t.value {
                Some(v) => format!("{}={v}:{}", t.key, t.effect.as_str()),
                None => format!("{}:{}", t.key, t.effect.as_str()),
            };
            if !taints.contains(&s) {
                taints.push(s);
            }
        }
        Registration { labels, taints }
    }

    /// The kubelet's `--node-labels` (if any) and `--register-with-taints`.
    fn kubelet_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if !self.labels.is_empty() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            flags.push(format!("--node-labels={}", labels.join(",")));
        }
        flags.push(format!("--register-with-taints={}", self.taints.join(",")));
        flags
    }
}

/// What user data needs to know about the cluster.
#[derive(Debug, Clone, Copy)]
pub struct ClusterInfo<'a> {
    pub name: &'a str,
    pub access: &'a ClusterAccess,
}

impl ClusterInfo<'_> {
    /// The cluster DNS address: the kube-dns Service's ClusterIP when the
    /// controller read it, else the service CIDR's `.10` (`::a` in an IPv6
    /// CIDR), as nodeadm and the EKS bootstrap compute it.
    fn dns_ip(&self) -> Option<String> {
        if let Some(ip) = &self.access.dns_ip {
            return Some(ip.clone());
        }
        let cidr = self.access.service_cidr.as_deref()?;
        let (net, _) = cidr.split_once('/')?;
        match net.parse::<std::net::IpAddr>().ok()? {
            std::net::IpAddr::V4(a) => {
                let mut octets = a.octets();
                octets[3] = 10;
                Some(std::net::Ipv4Addr::from(octets).to_string())
            }
            std::net::IpAddr::V6(a) => {
                let base = u128::from(a) & !0xffff;
                Some(std::net::Ipv6Addr::from(base | 0xa).to_string())
            }
        }
    }

    fn require(&self) -> Result<(&str, &str), String> {
        match (&self.access.endpoint, &self.access.ca_bundle) {
            (Some(e), Some(ca)) => Ok((e, ca)),
            _ => Err(
                "the cluster endpoint and certificate authority are not configured (needed in user data)"
                    .to_string(),
            ),
        }
    }
}

/// One part of a MIME multi-part user data document.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    content_type: String,
    body: String,
}

/// The parts of the user's user data: its own MIME parts, or the whole
/// text as one part of the type its first line suggests.
fn user_parts(user_data: Option<&str>, default_type: &str) -> Vec<Part> {
    let Some(text) = user_data.filter(|t| !t.trim().is_empty()) else {
        return Vec::new();
    };
    if let Some(parts) = parse_mime(text) {
        return parts;
    }
    let content_type = if text.trim_start().starts_with("#!") {
        "text/x-shellscript"
    } else {
        default_type
    };
    vec![Part {
        content_type: content_type.to_string(),
        body: text.to_string(),
    }]
}

/// Parses a MIME multi-part document, or `None` if `text` is not one.
fn parse_mime(text: &str) -> Option<Vec<Part>> {
    let text = text.replace("\r\n", "\n");
    let (head, body) = text.split_once("\n\n")?;
    let content_type = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("content-type:"))?;
    if !content_type.to_ascii_lowercase().contains("multipart/") {
        return None;
    }
    let boundary = content_type.split(';').find_map(|p| {
        let p = p.trim();
        p.strip_prefix("boundary=")
            .map(|b| b.trim_matches('"').to_string())
    })?;
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    for chunk in body.split(&delimiter).skip(1) {
        if chunk.starts_with("--") {
            break;
        }
        let chunk = chunk.strip_prefix('\n').unwrap_or(chunk);
        let (headers, content) = chunk.split_once("\n\n").unwrap_or(("", chunk));
        let ct = headers
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| "text/x-shellscript".to_string());
        parts.push(Part {
            content_type: ct,
            body: content.trim_end_matches('\n').to_string(),
        });
    }
    Some(parts)
}

fn render_mime(parts: &[Part]) -> String {
    let mut out = format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{MIME_BOUNDARY}\"\n\n"
    );
    for p in parts {
        out.push_str(&format!(
            "--{MIME_BOUNDARY}\nContent-Type: {}\n\n{}\n",
            p.content_type,
            p.body.trim_end_matches('\n')
        ));
    }
    out.push_str(&format!("--{MIME_BOUNDARY}--\n"));
    out
}

/// The kubelet settings of a launch: the node class's, with `maxPods` set
/// to the pods of the launch's instance types where the class sets none
/// (Karpenter always passes max pods, so the node's bootstrap never
/// computes its own) and `clusterDNS` defaulted to the cluster's.
fn effective_kubelet(
    class: &EC2NodeClass,
    cluster: ClusterInfo<'_>,
    max_pods: i64,
) -> KubeletConfiguration {
    let mut k = class.spec.kubelet.clone().unwrap_or_default();
    if k.max_pods.is_none() {
        k.max_pods = Some(i32::try_from(max_pods).unwrap_or(i32::MAX));
    }
    if k.cluster_dns.as_ref().is_none_or(Vec::is_empty)
        && let Some(dns) = cluster.dns_ip()
    {
        k.cluster_dns = Some(vec![dns]);
    }
    k
}

/// The kubelet settings, as kubelet configuration keys (AL2023's
/// `NodeConfig`).
fn kubelet_config(k: &KubeletConfiguration) -> serde_json::Map<String, Value> {
    let mut c = serde_json::Map::new();
    let mut put = |key: &str, v: Value| {
        c.insert(key.to_string(), v);
    };
    if let Some(dns) = &k.cluster_dns {
        put("clusterDNS", json!(dns));
    }
    if let Some(v) = k.max_pods {
        put("maxPods", json!(v));
    }
    if let Some(v) = k.pods_per_core {
        put("podsPerCore", json!(v));
    }
    for (key, map) in [
        ("kubeReserved", &k.kube_reserved),
        ("systemReserved", &k.system_reserved),
        ("evictionHard", &k.eviction_hard),
        ("evictionSoft", &k.eviction_soft),
        ("evictionSoftGracePeriod", &k.eviction_soft_grace_period),
    ] {
        if let Some(m) = map {
            put(key, json!(m));
        }
    }
    if let Some(v) = k.eviction_max_pod_grace_period {
        put("evictionMaxPodGracePeriod", json!(v));
    }
    if let Some(v) = k.image_gc_high_threshold_percent {
        put("imageGCHighThresholdPercent", json!(v));
    }
    if let Some(v) = k.image_gc_low_threshold_percent {
        put("imageGCLowThresholdPercent", json!(v));
    }
    if let Some(v) = k.cpu_cfs_quota {
        put("cpuCFSQuota", json!(v));
    }
    c
}

/// The kubelet's command-line flags for the kubelet settings, as the AL2
/// and Windows bootstrap scripts pass them on (`--kubelet-extra-args`).
fn kubelet_flags(registration: &Registration, k: &KubeletConfiguration) -> Vec<String> {
    let mut flags = registration.kubelet_flags();
    if let Some(v) = k.max_pods {
        flags.push(format!("--max-pods={v}"));
    }
    if let Some(v) = k.pods_per_core {
        flags.push(format!("--pods-per-core={v}"));
    }
    let join = |m: &BTreeMap<String, String>, sep: &str| {
        m.iter()
            .map(|(k, v)| format!("{k}{sep}{v}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    for (flag, map, sep) in [
        ("--system-reserved", &k.system_reserved, "="),
        ("--kube-reserved", &k.kube_reserved, "="),
        ("--eviction-hard", &k.eviction_hard, "<"),
        ("--eviction-soft", &k.eviction_soft, "<"),
        (
            "--eviction-soft-grace-period",
            &k.eviction_soft_grace_period,
            "=",
        ),
    ] {
        if let Some(m) = map.as_ref().filter(|m| !m.is_empty()) {
            flags.push(format!("{flag}={}", join(m, sep)));
        }
    }
    if let Some(v) = k.eviction_max_pod_grace_period {
        flags.push(format!("--eviction-max-pod-grace-period={v}"));
    }
    if let Some(v) = k.image_gc_high_threshold_percent {
        flags.push(format!("--image-gc-high-threshold={v}"));
    }
    if let Some(v) = k.image_gc_low_threshold_percent {
        flags.push(format!("--image-gc-low-threshold={v}"));
    }
    if let Some(v) = k.cpu_cfs_quota {
        flags.push(format!("--cpu-cfs-quota={v}"));
    }
    flags
}

/// Renders the user data of a launch (see the module documentation) for
/// instance types whose nodes have `max_pods` pods.
pub fn user_data(
    family: Family,
    class: &EC2NodeClass,
    cluster: ClusterInfo<'_>,
    registration: &Registration,
    max_pods: i64,
) -> Result<String, String> {
    let user = class.spec.user_data.as_deref();
    let kubelet = effective_kubelet(class, cluster, max_pods);
    let raid0 = class.spec.instance_store_policy == Some(InstanceStorePolicy::RAID0);
    match family {
        Family::Custom => Ok(user.unwrap_or_default().to_string()),
        Family::Al2023 => {
            let (endpoint, ca) = cluster.require()?;
            // nodeadm refuses a NodeConfig without the service CIDR.
            let cidr = cluster.access.service_cidr.as_deref().ok_or(
                "the cluster's service CIDR is not configured (--service-cidr): AL2023's NodeConfig needs it",
            )?;
            let mut spec = json!({
                "cluster": {
                    "name": cluster.name,
                    "apiServerEndpoint": endpoint,
                    "certificateAuthority": ca,
                    "cidr": cidr,
                },
                "kubelet": {
                    "config": kubelet_config(&kubelet),
                    "flags": registration.kubelet_flags(),
                },
            });
            if raid0 {
                spec["instance"] = json!({"localStorage": {"strategy": "RAID0"}});
            }
            let config = json!({
                "apiVersion": "node.eks.aws/v1alpha1",
                "kind": "NodeConfig",
                "spec": spec,
            });
            // JSON is YAML: nodeadm reads it as a NodeConfig document.
            let body = serde_json::to_string_pretty(&config).map_err(|e| e.to_string())?;
            let mut parts = user_parts(user, "application/node.eks.aws");
            parts.push(Part {
                content_type: "application/node.eks.aws".to_string(),
                body,
            });
            Ok(render_mime(&parts))
        }
        Family::Al2 => {
            let (endpoint, ca) = cluster.require()?;
            let mut args = vec![
                shell_quote(cluster.name),
                "--apiserver-endpoint".into(),
                shell_quote(endpoint),
                "--b64-cluster-ca".into(),
                shell_quote(ca),
            ];
            if let Some(dns) = kubelet.cluster_dns.as_ref().and_then(|d| d.first()) {
                // An IPv6 cluster DNS means an IPv6 cluster (as Karpenter
                // tells bootstrap.sh).
                if dns.parse::<std::net::Ipv6Addr>().is_ok() {
                    args.push("--ip-family ipv6".into());
                }
                args.push("--dns-cluster-ip".into());
                args.push(shell_quote(dns));
            }
            // bootstrap.sh would compute its own max pods otherwise.
            args.push("--use-max-pods false".into());
            args.push("--kubelet-extra-args".into());
            args.push(shell_quote(
                &kubelet_flags(registration, &kubelet).join(" "),
            ));
            if raid0 {
                args.push("--local-disks raid0".into());
            }
            let script = format!(
                "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n/etc/eks/bootstrap.sh {}\n",
                args.join(" ")
            );
            let mut parts = user_parts(user, "text/x-shellscript");
            parts.push(Part {
                content_type: "text/x-shellscript; charset=\"us-ascii\"".to_string(),
                body: script,
            });
            Ok(render_mime(&parts))
        }
        Family::Bottlerocket => {
            let (endpoint, ca) = cluster.require()?;
            let storage = raid0.then(|| bottlerocket_default_bind(class));
            bottlerocket(user, cluster, endpoint, ca, &kubelet, registration, storage)
        }
        Family::Windows => {
            let (endpoint, ca) = cluster.require()?;
            let extra = kubelet_flags(registration, &kubelet);
            let mut args = format!(
                "-EKSClusterName '{}' -APIServerEndpoint '{endpoint}' -Base64ClusterCA '{ca}' -KubeletExtraArgs '{}'",
                cluster.name,
                extra.join(" ")
            );
            if let Some(dns) = kubelet.cluster_dns.as_ref().and_then(|d| d.first()) {
                args.push_str(&format!(" -DNSClusterIP '{dns}'"));
            }
            let user_script = user
                .map(|u| {
                    u.trim()
                        .trim_start_matches("<powershell>")
                        .trim_end_matches("</powershell>")
                        .trim()
                        .to_string()
                })
                .filter(|u| !u.is_empty())
                .map(|u| format!("{u}\n"))
                .unwrap_or_default();
            Ok(format!(
                "<powershell>\n{user_script}[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n& $EKSBootstrapScriptFile {args}\n</powershell>\n"
            ))
        }
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Whether the node class's Bottlerocket is 1.46 or later, whose
/// `apiclient ephemeral-storage bind` binds the default directories by
/// itself: `@latest` or a version in the alias, else a `-vX.Y.Z` in a
/// resolved image's name (Karpenter's rule; unknown means older).
fn bottlerocket_default_bind(class: &EC2NodeClass) -> bool {
    let from_alias = class
        .spec
        .ami_selector_terms
        .iter()
        .filter_map(|t| t.alias.as_deref())
        .find_map(|a| a.split_once('@').map(|(_, v)| v.to_string()));
    let version = from_alias.or_else(|| {
        let names = class
            .status
            .as_ref()
            .and_then(|s| s.amis.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|a| a.name.clone());
        names
            .chain(
                class
                    .spec
                    .ami_selector_terms
                    .iter()
                    .filter_map(|t| t.name.clone()),
            )
            .find_map(|n| {
                n.split('-')
                    .find(|p| p.starts_with('v') && p.matches('.').count() == 2)
                    .map(str::to_string)
            })
    });
    let Some(v) = version else { return false };
    if v == "latest" {
        return true;
    }
    let mut parts = v.trim_start_matches('v').split('.');
    let (Some(Ok(major)), Some(Ok(minor)), Some(_)) = (
        parts.next().map(str::parse::<u32>),
        parts.next().map(str::parse::<u32>),
        parts.next(),
    ) else {
        return false;
    };
    major > 1 || (major == 1 && minor >= 46)
}

/// The bootstrap command that formats the instance store as RAID0 and
/// binds the kubelet's, containerd's and the pods' log directories to it.
const BOTTLEROCKET_STORAGE_COMMAND: &str = "000-mount-instance-storage";

#[allow(clippy::too_many_arguments)]
fn bottlerocket(
    user: Option<&str>,
    cluster: ClusterInfo<'_>,
    endpoint: &str,
    ca: &str,
    kubelet: &KubeletConfiguration,
    registration: &Registration,
    instance_storage: Option<bool>,
) -> Result<String, String> {
    use toml_edit::{Array, DocumentMut, Item, Table, value};
    let mut doc: DocumentMut = user
        .unwrap_or_default()
        .parse()
        .map_err(|e| format!("spec.userData is not TOML: {e}"))?;
    let settings = doc
        .entry("settings")
        .or_insert(Item::Table(Table::new()))
        .as_table_mut()
        .ok_or("spec.userData: settings is not a table")?;
    settings.set_implicit(true);
    if let Some(default_bind) = instance_storage {
        let commands = settings
            .entry("bootstrap-commands")
            .or_insert(Item::Table(Table::new()))
            .as_table_mut()
            .ok_or("spec.userData: settings.bootstrap-commands is not a table")?;
        commands.set_implicit(true);
        let mut bind = vec!["apiclient", "ephemeral-storage", "bind"];
        if !default_bind {
            bind.extend([
                "--dirs",
                "/var/lib/containerd",
                "/var/lib/kubelet",
                "/var/log/pods",
            ]);
        }
        let mut list = Array::new();
        for c in [vec!["apiclient", "ephemeral-storage", "init"], bind] {
            list.push(c.into_iter().collect::<Array>());
        }
        let mut command = Table::new();
        command["commands"] = value(list);
        command["mode"] = value("always");
        command["essential"] = value(true);
        commands.insert(BOTTLEROCKET_STORAGE_COMMAND, Item::Table(command));
    }
    let k8s = settings
        .entry("kubernetes")
        .or_insert(Item::Table(Table::new()))
        .as_table_mut()
        .ok_or("spec.userData: settings.kubernetes is not a table")?;
    k8s["cluster-name"] = value(cluster.name);
    k8s["api-server"] = value(endpoint);
    k8s["cluster-certificate"] = value(ca);
    if let Some(dns) = kubelet.cluster_dns.as_ref().and_then(|d| d.first()) {
        k8s["cluster-dns-ip"] = value(dns.as_str());
    }
    if let Some(m) = kubelet.max_pods {
        k8s["max-pods"] = value(i64::from(m));
    }
    if let Some(v) = kubelet.eviction_max_pod_grace_period {
        k8s["eviction-max-pod-grace-period"] = value(i64::from(v));
    }
    if let Some(v) = kubelet.image_gc_high_threshold_percent {
        k8s["image-gc-high-threshold-percent"] = value(v.to_string());
    }
    if let Some(v) = kubelet.image_gc_low_threshold_percent {
        k8s["image-gc-low-threshold-percent"] = value(v.to_string());
    }
    if let Some(v) = kubelet.cpu_cfs_quota {
        k8s["cpu-cfs-quota-enforced"] = value(v);
    }
    let mut merge_map = |key: &str, items: Vec<(String, Item)>| -> Result<(), String> {
        let table = k8s
            .entry(key)
            .or_insert(Item::Table(Table::new()))
            .as_table_like_mut()
            .ok_or(format!(
                "spec.userData: settings.kubernetes.{key} is not a table"
            ))?;
        for (k, v) in items {
            table.insert(&k, v);
        }
        Ok(())
    };
    merge_map(
        "node-labels",
        registration
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), value(v.as_str())))
            .collect(),
    )?;
    // Bottlerocket: key = ["value:Effect", ...].
    let mut taints: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in &registration.taints {
        let (kv, effect) = t.rsplit_once(':').unwrap_or((t, ""));
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        taints
            .entry(k.to_string())
            .or_default()
            .push(format!("{v}:{effect}"));
    }
    merge_map(
        "node-taints",
        taints
            .into_iter()
            .map(|(k, vs)| (k, value(vs.into_iter().collect::<Array>())))
            .collect(),
    )?;
    for (key, map) in [
        ("kube-reserved", &kubelet.kube_reserved),
        ("system-reserved", &kubelet.system_reserved),
        ("eviction-hard", &kubelet.eviction_hard),
        ("eviction-soft", &kubelet.eviction_soft),
        (
            "eviction-soft-grace-period",
            &kubelet.eviction_soft_grace_period,
        ),
    ] {
        if let Some(m) = map {
            merge_map(
                key,
                m.iter()
                    .map(|(k, v)| (k.clone(), value(v.as_str())))
                    .collect(),
            )?;
        }
    }
    Ok(doc.to_string())
}

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

fn is_zero(n: &i64) -> bool {
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
    fn of(r: &CapacityReservation) -> TemplateReservation {
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
fn strip_nulls(v: Value) -> Value {
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

fn volume_type(t: VolumeType) -> &'static str {
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
fn gib(size: &str) -> Option<i32> {
    let bytes = crate::model::quantity::parse_quantity("ephemeral-storage", size).ok()?;
    i32::try_from((bytes + (1 << 30) - 1) >> 30).ok()
}

/// One CreateFleet override.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    pub price: f64,
    /// Its rank in a price-overlaid NodeClaim's launch order (CreateFleet
    /// priority, lower first); `None` launches by price.
    pub priority: Option<usize>,
    /// The reservation a reserved launch targets through this override.
    pub reservation: Option<String>,
}

/// A launch, ready to send: the capacity type, the launch template per
/// image with its overrides (cheapest first, the config with the cheapest
/// override first), the instance tags but the NodeClaim's.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchPlan {
    pub capacity_type: String,
    /// `default` or `dedicated` (Karpenter's choice: default when allowed).
    pub tenancy: String,
    /// The placement group partition the launch asks for.
    pub partition: Option<i32>,
    pub configs: Vec<(TemplateSpec, Vec<Override>)>,
    pub tags: BTreeMap<String, String>,
    pub context: Option<String>,
}

impl LaunchPlan {
    /// Launches with the same key may share one CreateFleet call.
    pub fn batch_key(&self) -> String {
        format!("{self:?}")
    }

    /// The override an instance was launched from, by type and subnet or
    /// zone.
    pub fn find(
        &self,
        instance_type: &str,
        subnet: Option<&str>,
        zone: Option<&str>,
    ) -> Option<&Override> {
        self.configs.iter().flat_map(|(_, o)| o).find(|o| {
            o.instance_type == instance_type
                && (subnet.is_some_and(|s| s == o.subnet_id) || zone.is_some_and(|z| z == o.zone))
        })
    }

    /// The zones the plan launches into, each with the fewest pods of its
    /// instance types there (`pods_of` by type): the addresses a node of
    /// the launch takes at least, one per pod with the VPC CNI, which
    /// Karpenter counts against the zone's subnet while the launch is in
    /// flight.
    pub fn zone_pods(&self, pods_of: impl Fn(&str) -> i64) -> BTreeMap<String, i64> {
        let mut out: BTreeMap<String, i64> = BTreeMap::new();
        for o in self.configs.iter().flat_map(|(_, o)| o) {
            let pods = pods_of(&o.instance_type);
            out.entry(o.zone.clone())
                .and_modify(|p| *p = (*p).min(pods))
                .or_insert(pods);
        }
        out
    }

    /// Launches every override of a zone through `subnets[zone]` (the
    /// subnet chosen with the launches in flight counted).
    pub fn use_subnets(&mut self, subnets: &BTreeMap<String, String>) {
        for o in self.configs.iter_mut().flat_map(|(_, o)| o) {
            if let Some(s) = subnets.get(&o.zone) {
                o.subnet_id.clone_from(s);
            }
        }
    }

    /// The reservation of a reserved launch of `instance_type` in `zone`.
    pub fn reservation_of(&self, instance_type: &str, zone: &str) -> Option<&str> {
        self.configs
            .iter()
            .flat_map(|(_, o)| o)
            .find(|o| o.instance_type == instance_type && o.zone == zone)
            .and_then(|o| o.reservation.as_deref())
    }

    /// The reservations the plan targets.
    pub fn reservations(&self) -> BTreeSet<&str> {
        self.configs
            .iter()
            .flat_map(|(_, o)| o)
            .filter_map(|o| o.reservation.as_deref())
            .collect()
    }

    /// The kind of reservation a reserved plan launches into.
    pub fn reservation_kind(&self) -> Option<&TemplateReservation> {
        self.configs
            .iter()
            .find_map(|(t, _)| t.capacity_reservation.as_ref())
    }

    /// The zone of a subnet the plan launches into.
    pub fn zone_of(&self, subnet: &str) -> Option<&str> {
        self.configs
            .iter()
            .flat_map(|(_, o)| o)
            .find(|o| o.subnet_id == subnet)
            .map(|o| o.zone.as_str())
    }
}

/// Whether Karpenter launches `it` only when nothing generic fits: bare
/// metal, GPUs, Neuron or Gaudi accelerators.
fn is_exotic(it: &InstanceType) -> bool {
    let metal = it
        .requirements
        .get("karpenter.k8s.aws/instance-size")
        .is_some_and(|r| !r.complement && r.values.iter().any(|v| v.contains("metal")));
    metal
        || [
            "aws.amazon.com/neuron",
            "aws.amazon.com/neuroncore",
            "amd.com/gpu",
            "nvidia.com/gpu",
            "habana.ai/gaudi",
        ]
        .iter()
        .any(|r| it.capacity.get(r) > 0)
}

/// What a launch needs besides the NodeClaim.
pub struct PlanInput<'a> {
    pub cluster: ClusterInfo<'a>,
    pub class: &'a EC2NodeClass,
    pub family: Family,
    pub resolution: &'a NodeClassResolution,
    /// Every instance type of the node class (offerings priced).
    pub types: &'a [InstanceType],
    pub unavailable: &'a BTreeSet<OfferingKey>,
    /// Subnets recently out of addresses: a zone whose subnets all are is
    /// not launched into.
    pub unavailable_subnets: &'a BTreeSet<String>,
    /// Spot recently failed for want of its service-linked role: spot
    /// offerings count as unavailable.
    pub spot_unavailable: bool,
    /// The node class's capacity reservations (its status), and the
    /// instances left in each.
    pub reservations: &'a [CapacityReservation],
    pub availability: &'a Availability,
    /// The placement group the node class selects, resolved.
    pub placement: Option<&'a PlacementGroup>,
}

/// An offering a launch may use.
struct Candidate<'a> {
    price: f64,
    instance_type: &'a str,
    zone: &'a str,
    capacity_type: &'a str,
    subnet: &'a str,
    image: &'a Ami,
    pods: i64,
    /// EFA interfaces to attach (0 unless the NodeClaim requests EFA).
    efa: i64,
    /// The reservation a reserved offering launches into.
    reservation: Option<&'a CapacityReservation>,
}

/// Karpenter's reserved filters: with a reserved offering among the
/// candidates, only reserved ones stay, of the kind of the cheapest
/// (ordinary reservations before capacity blocks before interruptible
/// ones on a tie), and of capacity blocks only the cheapest, as
/// CreateFleet launches from one block at a time.
fn keep_reserved(candidates: &mut Vec<Candidate<'_>>) {
    let kind = |c: &Candidate<'_>| {
        c.reservation.map(|r| {
            let t = TemplateReservation::of(r);
            // Karpenter's priorities on a price tie.
            match (t.capacity_block, t.interruptible) {
                (false, false) => 0,
                (true, _) => 1,
                (false, true) => 2,
            }
        })
    };
    let Some(best) = candidates
        .iter()
        .filter_map(|c| Some((c.price, kind(c)?)))
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
        .map(|(_, k)| k)
    else {
        return;
    };
    candidates.retain(|c| kind(c) == Some(best));
    if best == 1 {
        let cheapest = candidates
            .iter()
            .enumerate()
            .min_by(|(_, a), (_, b)| a.price.total_cmp(&b.price))
            .map(|(i, _)| i)
            .unwrap_or(0);
        let one = candidates.swap_remove(cheapest);
        candidates.clear();
        candidates.push(one);
    }
}

/// Plans the launch of a NodeClaim (see the module documentation).
pub fn plan(claim: &NodeClaim, input: &PlanInput<'_>) -> Result<LaunchPlan, CloudError> {
    let class_name = input.class.metadata.name.clone().unwrap_or_default();
    let not_ready = |reason: String| CloudError::NodeClassNotReady {
        name: class_name.clone(),
        reason,
    };
    let requirements = requirements_of(&claim.spec.requirements)
        .map_err(|e| CloudError::InvalidRequest(format!("spec.requirements: {e}")))?;
    let requests = claim_requests(claim)?;
    let constraints = instance_constraints(&requirements);
    let allows = |key: &str, value: &str| requirements.get(key).is_none_or(|r| r.has(value));
    // Default tenancy where the claim allows it, as Karpenter chooses.
    let tenancy = if allows(LABEL_TENANCY, TENANCY_DEFAULT) {
        TENANCY_DEFAULT
    } else {
        TENANCY_DEDICATED
    };
    // A zone's id, where the node class's status knows it.
    let zone_id_of: BTreeMap<&str, &str> = input
        .resolution
        .subnets
        .iter()
        .filter_map(|s| Some((s.zone.as_str(), s.zone_id.as_deref()?)))
        .collect();
    let zone_id_allowed = |zone: &str| match requirements.get(LABEL_ZONE_ID) {
        None => true,
        Some(r) => zone_id_of.get(zone).is_some_and(|id| r.has(id)),
    };
    let mut subnet_of_zone: BTreeMap<&str, &str> = BTreeMap::new();
    // Zones whose every subnet is out of addresses: their offerings are
    // unavailable, as if out of capacity.
    let mut full_zones: BTreeSet<&str> = BTreeSet::new();
    for s in &input.resolution.subnets {
        if input.unavailable_subnets.contains(&s.id) {
            full_zones.insert(s.zone.as_str());
            continue;
        }
        subnet_of_zone
            .entry(s.zone.as_str())
            .or_insert(s.id.as_str());
    }
    full_zones.retain(|z| !subnet_of_zone.contains_key(z));

    // The reservation labels a node gets only when launched into one: a
    // requirement on them that does not allow their absence keeps the
    // claim to reserved offerings, and picks among reservations.
    let reservation_keys = [
        LABEL_RESERVATION_ID,
        LABEL_RESERVATION_TYPE,
        LABEL_RESERVATION_INTERRUPTIBLE,
    ];
    let needs_reservation = reservation_keys
        .iter()
        .any(|k| requirements.get(k).is_some_and(|r| !r.allows_absent()));
    let reservation_allowed = |r: &CapacityReservation| {
        reservations::labels(r)
            .iter()
            .all(|(k, v)| requirements.get(k).is_none_or(|req| req.has(v)))
    };
    let mut allowed_any = false;
    let mut known_out = Vec::new();
    // EFA interfaces are attached only for a NodeClaim that requests EFA,
    // or from a node class that configures its interfaces (Karpenter's
    // rule): one per the type's `vpc.amazonaws.com/efa`.
    let wants_efa = requests.get(EFA) > 0 || input.class.spec.network_interfaces.is_some();
    let mut candidates: Vec<Candidate<'_>> = Vec::new();
    for it in input.types {
        if !type_allowed(it, &constraints) || !requests.fits_in(&it.allocatable) {
            continue;
        }
        let image = image_for(&input.resolution.amis, it);
        for o in &it.offerings {
            let reserved = o.capacity_type == crate::api::CAPACITY_TYPE_RESERVED;
            if !allows(ZONE, &o.zone)
                || !allows(CAPACITY_TYPE, &o.capacity_type)
                || !zone_id_allowed(&o.zone)
                || (needs_reservation && !reserved)
            {
                continue;
            }
            allowed_any = true;
            let key = offering_key(it, o);
            if input.unavailable.contains(&key)
                || (input.spot_unavailable && o.capacity_type == crate::api::CAPACITY_TYPE_SPOT)
                || full_zones.contains(o.zone.as_str())
            {
                known_out.push(key);
                continue;
            }
            // A reserved offering launches into one of its reservations
            // with instances left; with none, it is out.
            let reservation = if reserved {
                match reservations::choose(
                    input.reservations,
                    input.availability,
                    &it.name,
                    &o.zone,
                    reservation_allowed,
                ) {
                    Some(r) => Some(r),
                    None => {
                        known_out.push(key);
                        continue;
                    }
                }
            } else {
                None
            };
            let (Some(image), Some(subnet)) = (image, subnet_of_zone.get(o.zone.as_str())) else {
                continue;
            };
            if o.available {
                candidates.push(Candidate {
                    price: o.price,
                    instance_type: &it.name,
                    zone: &o.zone,
                    capacity_type: &o.capacity_type,
                    subnet,
                    image,
                    pods: it.capacity.get(PODS),
                    efa: if wants_efa { it.capacity.get(EFA) } else { 0 },
                    reservation,
                });
            }
        }
    }
    if !allowed_any {
        return Err(CloudError::InvalidRequest(
            "no offering of any instance type satisfies the NodeClaim's requirements and resource requests"
                .to_string(),
        ));
    }
    if candidates.is_empty() {
        if known_out.is_empty() {
            return Err(not_ready(
                "no allowed instance type has an image, a subnet in its zones, and a price"
                    .to_string(),
            ));
        }
        known_out.sort();
        return Err(CloudError::InsufficientCapacity {
            offerings: known_out,
        });
    }
    // Karpenter's launch-time filters, in its order. Reserved first: with
    // a reserved offering left, only reserved offerings, of one kind.
    keep_reserved(&mut candidates);
    let by_name: BTreeMap<&str, &InstanceType> =
        input.types.iter().map(|t| (t.name.as_str(), t)).collect();
    let min_values: Vec<(&str, i64)> = claim
        .spec
        .requirements
        .iter()
        .filter_map(|r| Some((r.key.as_str(), r.min_values?)))
        .collect();
    if min_values.is_empty() {
        // Exotic types (GPUs, accelerators, bare metal) only when nothing
        // generic fits.
        let exotic = |name: &str| by_name.get(name).is_some_and(|t| is_exotic(t));
        if candidates.iter().any(|c| !exotic(c.instance_type)) {
            candidates.retain(|c| !exotic(c.instance_type));
        }
        // No spot offering pricier than the cheapest on-demand one.
        if allows(CAPACITY_TYPE, crate::api::CAPACITY_TYPE_SPOT)
            && allows(CAPACITY_TYPE, crate::api::CAPACITY_TYPE_ON_DEMAND)
        {
            let cheapest_on_demand = candidates
                .iter()
                .filter(|c| c.capacity_type == crate::api::CAPACITY_TYPE_ON_DEMAND)
                .map(|c| c.price)
                .min_by(f64::total_cmp);
            let any_spot = candidates
                .iter()
                .any(|c| c.capacity_type == crate::api::CAPACITY_TYPE_SPOT);
            if let (Some(limit), true) = (cheapest_on_demand, any_spot) {
                candidates.retain(|c| {
                    c.capacity_type != crate::api::CAPACITY_TYPE_SPOT || c.price <= limit
                });
            }
        }
    }
    // At most MAX_INSTANCE_TYPES types, the cheapest (by their cheapest
    // offering, either capacity type); with minValues, they must still
    // offer that many values of each key.
    let mut lowest: BTreeMap<&str, f64> = BTreeMap::new();
    for c in &candidates {
        let e = lowest.entry(c.instance_type).or_insert(c.price);
        *e = e.min(c.price);
    }
    let mut ordered: Vec<(&str, f64)> = lowest.into_iter().collect();
    ordered.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    ordered.truncate(MAX_INSTANCE_TYPES);
    let kept: BTreeSet<&str> = ordered.iter().map(|(n, _)| *n).collect();
    for (key, min) in &min_values {
        let values: BTreeSet<&str> = kept
            .iter()
            .filter_map(|n| by_name.get(n))
            .filter_map(|t| t.requirements.get(key))
            .filter(|r| !r.complement)
            .flat_map(|r| r.values.iter().map(String::as_str))
            .collect();
        if (values.len() as i64) < *min {
            tracing::warn!(
                key,
                min_values = min,
                found = values.len(),
                "minValues not met by the cheapest {MAX_INSTANCE_TYPES} instance types"
            );
            return Err(CloudError::InsufficientCapacity {
                offerings: Vec::new(),
            });
        }
    }
    candidates.retain(|c| kept.contains(c.instance_type));
    // Reserved, else spot, else on-demand (Karpenter's order).
    let has = |ct: &str| candidates.iter().any(|c| c.capacity_type == ct);
    let capacity_type = if has(crate::api::CAPACITY_TYPE_RESERVED) {
        crate::api::CAPACITY_TYPE_RESERVED
    } else if has(crate::api::CAPACITY_TYPE_SPOT) {
        crate::api::CAPACITY_TYPE_SPOT
    } else {
        crate::api::CAPACITY_TYPE_ON_DEMAND
    };
    candidates.retain(|c| c.capacity_type == capacity_type);
    // A price-overlaid NodeClaim launches in its overlaid order, with
    // CreateFleet's `prioritized` strategies, as the reference does.
    let priority = launch_priority(claim);
    let rank = |t: &str| {
        priority
            .as_ref()
            .map_or(0, |p| p.get(t).copied().unwrap_or(usize::MAX))
    };
    candidates.sort_by(|a, b| {
        rank(a.instance_type)
            .cmp(&rank(b.instance_type))
            .then_with(|| a.price.total_cmp(&b.price))
            .then_with(|| a.instance_type.cmp(b.instance_type))
            .then_with(|| a.zone.cmp(b.zone))
    });

    let registration = Registration::of(claim);
    // One user data per max pods: the kubelet is told its pods, so types
    // with different pod counts need different launch templates.
    let mut user_data_of: BTreeMap<i64, String> = BTreeMap::new();
    for c in &candidates {
        if let std::collections::btree_map::Entry::Vacant(e) = user_data_of.entry(c.pods) {
            e.insert(
                user_data(
                    input.family,
                    input.class,
                    input.cluster,
                    &registration,
                    c.pods,
                )
                .map_err(&not_ready)?,
            );
        }
    }
    let spec = &input.class.spec;
    let mut security_group_ids: Vec<String> = input
        .resolution
        .security_groups
        .iter()
        .map(|g| g.id.clone())
        .collect();
    security_group_ids.sort();
    let block_devices = block_devices(input.family, input.class);
    let metadata = spec
        .metadata_options
        .clone()
        .unwrap_or_else(MetadataOptions::defaulted);
    // The launch's tags (but the NodeClaim's): on the instances, volumes
    // and fleet, and on the templates and what they create (network
    // interfaces, spot requests), as Karpenter tags them.
    let mut tags: BTreeMap<String, String> = spec.tags.clone().unwrap_or_default();
    tags.insert(cluster_tag(input.cluster.name), "owned".to_string());
    tags.insert(TAG_EKS_CLUSTER.to_string(), input.cluster.name.to_string());
    tags.insert(TAG_NODECLASS.to_string(), class_name.clone());
    // Always, empty for a NodeClaim of no NodePool (as Karpenter): the IAM
    // policy lets the controller create only what carries the key.
    tags.insert(
        TAG_NODEPOOL.to_string(),
        claim.nodepool_name().unwrap_or_default().to_string(),
    );
    let spot = capacity_type == crate::api::CAPACITY_TYPE_SPOT;
    // The placement group, and a partition group's partition: the lowest
    // the NodeClaim allows, as Karpenter picks it.
    let placement = input.placement.map(|pg| {
        let allowed = requirements
            .get(LABEL_PLACEMENT_GROUP_PARTITION)
            .filter(|r| !r.complement)
            .map(|r| r.values.iter().cloned().collect::<Vec<_>>());
        TemplatePlacement {
            group_id: pg.id.clone(),
            partition: pg.partition_for(allowed.as_deref()),
        }
    });
    let mut configs: Vec<(TemplateSpec, Vec<Override>)> = Vec::new();
    for c in candidates {
        let o = Override {
            instance_type: c.instance_type.to_string(),
            zone: c.zone.to_string(),
            subnet_id: c.subnet.to_string(),
            price: c.price,
            priority: priority.as_ref().map(|_| rank(c.instance_type)),
            reservation: c.reservation.map(|r| r.id.clone()),
        };
        let image = c.image;
        let efa = c.efa;
        let user_data = &user_data_of[&c.pods];
        // A template per reservation: it names the one it targets.
        let target = c.reservation.map(TemplateReservation::of);
        match configs.iter_mut().find(|(t, _)| {
            t.image_id == image.id
                && t.user_data == *user_data
                && t.efa_interfaces == efa
                && t.capacity_reservation == target
        }) {
            Some((_, overrides)) => overrides.push(o),
            None => configs.push((
                TemplateSpec {
                    image_id: image.id.clone(),
                    user_data: user_data.clone(),
                    block_devices: block_devices.clone(),
                    metadata: metadata.clone(),
                    security_group_ids: security_group_ids.clone(),
                    instance_profile: input.resolution.instance_profile.clone(),
                    monitoring: spec.detailed_monitoring.unwrap_or(false),
                    public_ip: spec.associate_public_ip_address,
                    nodeclass: class_name.clone(),
                    tenancy: (tenancy == TENANCY_DEDICATED).then(|| tenancy.to_string()),
                    tags: tags.clone(),
                    spot,
                    efa_interfaces: efa,
                    ipv6: input.cluster.access.ipv6(),
                    connection_tracking: spec.connection_tracking.clone().filter(|ct| {
                        ct.tcp_established_timeout.is_some()
                            || ct.udp_stream_timeout.is_some()
                            || ct.udp_timeout.is_some()
                    }),
                    ip_prefix_count: spec.ip_prefix_count,
                    network_interfaces: spec.network_interfaces.clone().unwrap_or_default(),
                    nested_virtualization: spec
                        .cpu_options
                        .as_ref()
                        .and_then(|c| c.nested_virtualization),
                    placement_group: placement.clone(),
                    capacity_reservation: target,
                },
                vec![o],
            )),
        }
    }

    Ok(LaunchPlan {
        partition: placement.and_then(|p| p.partition),
        capacity_type: capacity_type.to_string(),
        tenancy: tenancy.to_string(),
        configs,
        tags,
        context: spec.context.clone(),
    })
}

/// An instance CreateFleet launched.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetInstance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: Option<String>,
    pub capacity_type: String,
}

/// CreateFleet's answer, read against the plan that asked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetOutcome {
    pub instances: Vec<FleetInstance>,
    /// Offerings that had no capacity.
    pub refused: Vec<OfferingKey>,
    /// Other errors, `code: message`.
    pub errors: Vec<String>,
    /// An access-denied error's message.
    pub denied: Option<String>,
    /// A launch template was missing (deleted under us).
    pub template_missing: bool,
    /// Subnets that had no free address ([`SUBNET_FULL`]).
    pub full_subnets: Vec<String>,
    /// Spot could not launch for want of its service-linked role
    /// ([`SPOT_ROLE_MISSING`]).
    pub spot_role_missing: bool,
    /// Reservations a reserved launch found without capacity
    /// (`ReservationCapacityExceeded`, or another capacity error).
    pub exhausted_reservations: Vec<String>,
}

/// The capacity type of an instance or error of a CreateFleet answer, by
/// its lifecycle: a reserved plan launches reserved (EC2 says
/// `on-demand`, or the block's or interruptible reservation's market).
fn answered_capacity_type(lifecycle: Option<&str>, plan: &LaunchPlan) -> String {
    match lifecycle {
        Some("spot") => crate::api::CAPACITY_TYPE_SPOT.to_string(),
        _ if plan.capacity_type == crate::api::CAPACITY_TYPE_RESERVED => {
            crate::api::CAPACITY_TYPE_RESERVED.to_string()
        }
        Some(_) => crate::api::CAPACITY_TYPE_ON_DEMAND.to_string(),
        None => plan.capacity_type.clone(),
    }
}

/// Whether an error code means a launch template does not exist (any
/// more): `InvalidLaunchTemplateName.NotFoundException`,
/// `InvalidLaunchTemplateId.NotFound`, ...
pub fn is_template_not_found(code: &str) -> bool {
    code.starts_with("InvalidLaunchTemplateName.NotFound")
        || code.starts_with("InvalidLaunchTemplateId.NotFound")
        || code.starts_with("InvalidLaunchTemplateId.VersionNotFound")
}

/// Reads CreateFleet's output.
pub fn outcome(
    out: &aws_sdk_ec2::operation::create_fleet::CreateFleetOutput,
    plan: &LaunchPlan,
) -> FleetOutcome {
    let mut o = FleetOutcome::default();
    for i in out.instances() {
        let overrides = i
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        let subnet = i
            .subnet_id()
            .or_else(|| overrides.and_then(|x| x.subnet_id()))
            .map(str::to_string);
        let Some(it) = i.instance_type().map(|t| t.as_str()).or_else(|| {
            overrides
                .and_then(|x| x.instance_type())
                .map(|t| t.as_str())
        }) else {
            continue;
        };
        let zone = i
            .availability_zone()
            .or_else(|| overrides.and_then(|x| x.availability_zone()))
            .or_else(|| subnet.as_deref().and_then(|s| plan.zone_of(s)))
            .unwrap_or_default()
            .to_string();
        let capacity_type = answered_capacity_type(i.lifecycle().map(|l| l.as_str()), plan);
        for id in i.instance_ids() {
            o.instances.push(FleetInstance {
                id: id.clone(),
                instance_type: it.to_string(),
                zone: zone.clone(),
                subnet_id: subnet.clone(),
                capacity_type: capacity_type.clone(),
            });
        }
    }
    for e in out.errors() {
        let code = e.error_code().unwrap_or_default();
        let message = e.error_message().unwrap_or_default();
        let overrides = e
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        if code == SUBNET_FULL
            && let Some(subnet) = overrides.and_then(|x| x.subnet_id())
            && !o.full_subnets.iter().any(|s| s == subnet)
        {
            o.full_subnets.push(subnet.to_string());
        }
        if code == SPOT_ROLE_MISSING {
            // Every spot offering of the launch is out, not just one.
            o.spot_role_missing = true;
            for (_, overrides) in &plan.configs {
                for x in overrides {
                    let key = OfferingKey {
                        instance_type: x.instance_type.clone(),
                        zone: x.zone.clone(),
                        capacity_type: crate::api::CAPACITY_TYPE_SPOT.to_string(),
                    };
                    if plan.capacity_type == crate::api::CAPACITY_TYPE_SPOT
                        && !o.refused.contains(&key)
                    {
                        o.refused.push(key);
                    }
                }
            }
        } else if CAPACITY_ERRORS.contains(&code) {
            let it = overrides
                .and_then(|x| x.instance_type())
                .map(|t| t.as_str().to_string());
            let zone = overrides.and_then(|x| x.availability_zone()).or_else(|| {
                overrides
                    .and_then(|x| x.subnet_id())
                    .and_then(|s| plan.zone_of(s))
            });
            if let (Some(it), Some(zone)) = (it, zone) {
                if let Some(r) = plan.reservation_of(&it, zone)
                    && !o.exhausted_reservations.iter().any(|x| x == r)
                {
                    o.exhausted_reservations.push(r.to_string());
                }
                let key = OfferingKey {
                    instance_type: it,
                    zone: zone.to_string(),
                    capacity_type: answered_capacity_type(e.lifecycle().map(|l| l.as_str()), plan),
                };
                if !o.refused.contains(&key) {
                    o.refused.push(key);
                }
            }
        } else if code == "UnauthorizedOperation" || code.starts_with("AccessDenied") {
            o.denied = Some(format!("{code}: {message}"));
        } else if is_template_not_found(code) {
            o.template_missing = true;
        } else {
            let e = format!("{code}: {message}");
            if !o.errors.contains(&e) {
                o.errors.push(e);
            }
        }
    }
    o.refused.sort();
    o
}

/// `names` in order, cut into runs whose comma-joined names fit in `max`
/// characters (a tag's value); a name longer than that runs alone.
pub fn batches(names: &[String], max: usize) -> Vec<&[String]> {
    let mut out = Vec::new();
    let (mut start, mut len) = (0, 0);
    for (i, name) in names.iter().enumerate() {
        let add = if i == start {
            name.len()
        } else {
            name.len() + 1
        };
        if i > start && len + add > max {
            out.push(&names[start..i]);
            (start, len) = (i, name.len());
        } else {
            len += add;
        }
    }
    if start < names.len() {
        out.push(&names[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
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
        let al2 = user_data(Family::Al2, &class, cluster, &Registration::default(), 29)
            .expect("user data");
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
}
