//! User data per AMI family (see the module above): nodeadm's
//! `NodeConfig` in MIME parts, Bottlerocket's TOML, AL2's and Windows'
//! bootstrap scripts, and the kubelet settings a node class sets.

use super::*;

/// Whether the kubelet accepts `key` in `--node-labels`: it refuses keys
/// in the `kubernetes.io` and `k8s.io` domains (and their subdomains) but
/// for `kubelet.kubernetes.io` and `node.kubernetes.io`, and refuses to
/// start with one. Such labels (`node-role.kubernetes.io/worker`, which
/// `validate` accepts on a NodePool) reach the Node when its NodeClaim
/// registers it, as Karpenter sets them.
pub(super) fn kubelet_may_set(key: &str) -> bool {
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
    pub(super) fn dns_ip(&self) -> Option<String> {
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
pub(super) struct Part {
    pub(super) content_type: String,
    pub(super) body: String,
}

/// The parts of the user's user data: its own MIME parts, or the whole
/// text as one part of the type its first line suggests.
pub(super) fn user_parts(user_data: Option<&str>, default_type: &str) -> Vec<Part> {
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
pub(super) fn parse_mime(text: &str) -> Option<Vec<Part>> {
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

pub(super) fn render_mime(parts: &[Part]) -> String {
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
pub(super) fn effective_kubelet(
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
pub(super) fn kubelet_config(k: &KubeletConfiguration) -> serde_json::Map<String, Value> {
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
pub(super) fn kubelet_flags(registration: &Registration, k: &KubeletConfiguration) -> Vec<String> {
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

pub(super) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Whether the node class's Bottlerocket is 1.46 or later, whose
/// `apiclient ephemeral-storage bind` binds the default directories by
/// itself: `@latest` or a version in the alias, else a `-vX.Y.Z` in a
/// resolved image's name (Karpenter's rule; unknown means older).
pub(super) fn bottlerocket_default_bind(class: &EC2NodeClass) -> bool {
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
pub(super) const BOTTLEROCKET_STORAGE_COMMAND: &str = "000-mount-instance-storage";

#[allow(clippy::too_many_arguments)]
pub(super) fn bottlerocket(
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
