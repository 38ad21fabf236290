//! The AWS provider's configuration, and the SDK clients built from it.
//!
//! Credentials, region and endpoint come from the SDK's usual chain
//! (environment, `~/.aws` profiles, IRSA web identity, EKS Pod Identity,
//! instance metadata); `region` and `endpoint_url` override them. The SDK's
//! own retries are disabled: [`super::error::call`] retries throttling and
//! transient failures with backoff and jitter, once, in one place.

use std::path::PathBuf;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};

use super::error::RetrySettings;

/// The SSM prefix of the public EKS, Bottlerocket and Windows AMI
/// parameters.
pub const DEFAULT_SSM_PARAMETER_ROOT: &str = "/aws/service";
/// The share of an instance's memory the hypervisor and firmware keep
/// (`VM_MEMORY_OVERHEAD_PERCENT` of the reference, as a fraction).
pub const DEFAULT_VM_MEMORY_OVERHEAD: f64 = 0.075;

/// How long the instance types and their zones are kept before they are
/// read again (the reference refreshes them as often).
const INSTANCE_TYPES_TTL: Duration = Duration::from_secs(5 * 60);
/// On-demand prices change rarely; the reference refreshes them twice a day.
const ON_DEMAND_PRICES_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// Spot prices move during the day.
const SPOT_PRICES_TTL: Duration = Duration::from_secs(60 * 60);
/// A node class's subnets, security groups and images, for launches that
/// find no resolution in the node class's status.
const RESOLUTION_TTL: Duration = Duration::from_secs(60);
/// The instance list behind `is_drifted`: one DescribeInstances serves every
/// NodeClaim checked within this time.
const INSTANCE_CACHE_TTL: Duration = Duration::from_secs(30);
/// CreateFleet batching: a launch waits this long for identical ones...
const LAUNCH_BATCH_IDLE: Duration = Duration::from_millis(35);
/// ...but never longer than this in all (the reference's windows).
const LAUNCH_BATCH_MAX: Duration = Duration::from_secs(1);
/// How often the cluster's Kubernetes version is read again (Karpenter's
/// version provider), so AMI aliases follow a control-plane upgrade.
const KUBERNETES_VERSION_TTL: Duration = Duration::from_secs(5 * 60);
/// How often unused launch templates are looked for and deleted.
const LAUNCH_TEMPLATE_CLEANUP_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// How long an instance profile just made or replaced is kept from garbage
/// collection, as the node class's status may not name it yet (Karpenter's
/// `ProtectedProfilesTTL`).
const PROTECTED_PROFILE_TTL: Duration = Duration::from_secs(60 * 60);
/// How often the background work looks at what is due.
const BACKGROUND_TICK: Duration = Duration::from_secs(30);
/// No AWS call takes longer than this, retries aside.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The cluster's API server, as nodes need it to join (user data).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterAccess {
    /// `https://...`, the EKS cluster endpoint.
    pub endpoint: Option<String>,
    /// The base64 certificate authority bundle.
    pub ca_bundle: Option<String>,
    /// The service CIDR (the kubelet's cluster DNS is its `.10`).
    pub service_cidr: Option<String>,
    /// The cluster DNS address: the `kube-system/kube-dns` Service's
    /// ClusterIP, as Karpenter reads it at start ([`kube_dns_ip`]); `None`
    /// falls back to the service CIDR's `.10` (`::a` for IPv6).
    pub dns_ip: Option<String>,
}

impl ClusterAccess {
    /// Whether the cluster serves IPv6: its DNS address, else its service
    /// CIDR, is IPv6 (Karpenter's `ClusterIPFamily`, from the kube-dns IP).
    pub fn ipv6(&self) -> bool {
        let v6 = |s: &str| s.split('/').next().unwrap_or_default().contains(':');
        match (&self.dns_ip, &self.service_cidr) {
            (Some(ip), _) => v6(ip),
            (None, Some(cidr)) => v6(cidr),
            (None, None) => false,
        }
    }

    /// Fills what is not set from DescribeCluster's answer: what is set
    /// (the command line's, the controller's own trust) wins.
    pub fn fill(&mut self, described: &DescribedCluster) {
        if self.endpoint.is_none() {
            self.endpoint.clone_from(&described.endpoint);
        }
        if self.ca_bundle.is_none() {
            self.ca_bundle.clone_from(&described.ca_bundle);
        }
        if self.service_cidr.is_none() {
            self.service_cidr.clone_from(&described.service_cidr);
        }
    }

    /// Whether DescribeCluster has something to add.
    pub fn incomplete(&self) -> bool {
        self.endpoint.is_none() || self.ca_bundle.is_none() || self.service_cidr.is_none()
    }
}

/// What `eks:DescribeCluster` says about how nodes join the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribedCluster {
    pub endpoint: Option<String>,
    /// `certificateAuthority.data`: the base64 PEM bundle.
    pub ca_bundle: Option<String>,
    /// `kubernetesNetworkConfig.serviceIpv4Cidr`, else its
    /// `serviceIpv6Cidr` (an IPv6 cluster), as Karpenter picks.
    pub service_cidr: Option<String>,
    /// `kubernetesNetworkConfig.ipFamily` (`ipv4`, `ipv6`).
    pub ip_family: Option<String>,
}

/// The cluster `name` as EKS describes it. Access denied names
/// `eks:DescribeCluster` ([`super::error::AwsError::AccessDenied`]).
pub async fn describe_cluster(
    eks: &aws_sdk_eks::Client,
    retry: &RetrySettings,
    name: &str,
) -> Result<DescribedCluster, super::error::AwsError> {
    let out = super::error::call(retry, "eks:DescribeCluster", || {
        eks.describe_cluster().name(name).send()
    })
    .await?;
    let Some(c) = out.cluster() else {
        return Ok(DescribedCluster::default());
    };
    let net = c.kubernetes_network_config();
    let nonempty = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_string);
    Ok(DescribedCluster {
        endpoint: nonempty(c.endpoint()),
        ca_bundle: nonempty(c.certificate_authority().and_then(|a| a.data())),
        service_cidr: nonempty(net.and_then(|n| n.service_ipv4_cidr()))
            .or_else(|| nonempty(net.and_then(|n| n.service_ipv6_cidr()))),
        ip_family: net
            .and_then(|n| n.ip_family())
            .map(|f| f.as_str().to_string()),
    })
}

/// The EKS client of an SDK configuration (the same chain, region and
/// endpoint override as the others).
pub fn eks_client(sdk: &SdkConfig) -> aws_sdk_eks::Client {
    aws_sdk_eks::Client::new(sdk)
}

/// Where the cluster DNS Service lives (Karpenter's `KubeDNSIP`).
pub const KUBE_DNS_NAMESPACE: &str = "kube-system";
pub const KUBE_DNS_SERVICE: &str = "kube-dns";

/// The ClusterIP of the `kube-system/kube-dns` Service, the address nodes
/// use for cluster DNS. An error (no such Service, a custom DNS setup, no
/// permission) leaves the service CIDR's `.10` in use, as Karpenter carries
/// on without it.
pub async fn kube_dns_ip(client: &kube::Client) -> Result<String, String> {
    use k8s_openapi::api::core::v1::Service;
    let api: kube::Api<Service> = kube::Api::namespaced(client.clone(), KUBE_DNS_NAMESPACE);
    let svc = api
        .get(KUBE_DNS_SERVICE)
        .await
        .map_err(|e| format!("reading {KUBE_DNS_NAMESPACE}/{KUBE_DNS_SERVICE}: {e}"))?;
    let ip = svc.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
    ip.parse::<std::net::IpAddr>()
        .map(|a| a.to_string())
        .map_err(|_| format!("{KUBE_DNS_NAMESPACE}/{KUBE_DNS_SERVICE} has no cluster IP ({ip:?})"))
}

/// The certificate authority a kube client configuration trusts, as the
/// base64 PEM bundle user data carries (Karpenter's `GetCABundle`, from
/// its REST config); `None` when it trusts the system roots only.
pub fn kube_ca_bundle(config: &kube::Config) -> Option<String> {
    use base64::Engine;
    let b64 = &base64::engine::general_purpose::STANDARD;
    let certs = config.root_cert.as_ref().filter(|c| !c.is_empty())?;
    let mut pem = String::new();
    for der in certs {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let body = b64.encode(der);
        for line in body.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    Some(b64.encode(pem))
}

/// How the AWS provider behaves. [`AwsConfig::new`] gives the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct AwsConfig {
    /// The EKS cluster: instances are tagged `kubernetes.io/cluster/<name>`.
    pub cluster_name: String,
    /// The region; `None` reads it from the environment or profile.
    pub region: Option<String>,
    /// Send every call to this endpoint (e.g. an emulator, or a VPC
    /// endpoint); `None` uses `AWS_ENDPOINT_URL` or the service's own.
    pub endpoint_url: Option<String>,
    /// The cluster's Kubernetes version (`1.34`) at start; AMI aliases
    /// resolve for it. See [`kubernetes_version`] to read it from the API
    /// server, and [`super::background`] to keep it current.
    pub kubernetes_version: Option<String>,
    /// Where AMI alias parameters live (`/aws/service`).
    pub ssm_parameter_root: String,
    /// The fraction of memory the VM keeps (`0.075`).
    pub vm_memory_overhead: f64,
    /// Network interfaces kept out of the max-pods computation.
    pub reserved_enis: i64,
    /// On-demand prices when the Pricing API cannot be used or lacks a type.
    pub pricing_file: Option<PathBuf>,
    /// No Pricing API (isolated VPCs, partitions without it): prices come
    /// from `pricing_file` only.
    pub isolated_vpc: bool,
    pub cluster: ClusterAccess,
    pub retry: RetrySettings,
    pub instance_types_ttl: Duration,
    pub on_demand_prices_ttl: Duration,
    pub spot_prices_ttl: Duration,
    pub resolution_ttl: Duration,
    pub instance_cache_ttl: Duration,
    pub launch_batch_idle: Duration,
    pub launch_batch_max: Duration,
    pub kubernetes_version_ttl: Duration,
    pub launch_template_cleanup_interval: Duration,
    pub protected_profile_ttl: Duration,
    pub background_tick: Duration,
}

impl AwsConfig {
    /// The defaults for a cluster.
    pub fn new(cluster_name: impl Into<String>) -> Self {
        AwsConfig {
            cluster_name: cluster_name.into(),
            region: None,
            endpoint_url: None,
            kubernetes_version: None,
            ssm_parameter_root: DEFAULT_SSM_PARAMETER_ROOT.to_string(),
            vm_memory_overhead: DEFAULT_VM_MEMORY_OVERHEAD,
            reserved_enis: 0,
            pricing_file: None,
            isolated_vpc: false,
            cluster: ClusterAccess::default(),
            retry: RetrySettings::default(),
            instance_types_ttl: INSTANCE_TYPES_TTL,
            on_demand_prices_ttl: ON_DEMAND_PRICES_TTL,
            spot_prices_ttl: SPOT_PRICES_TTL,
            resolution_ttl: RESOLUTION_TTL,
            instance_cache_ttl: INSTANCE_CACHE_TTL,
            launch_batch_idle: LAUNCH_BATCH_IDLE,
            launch_batch_max: LAUNCH_BATCH_MAX,
            kubernetes_version_ttl: KUBERNETES_VERSION_TTL,
            launch_template_cleanup_interval: LAUNCH_TEMPLATE_CLEANUP_INTERVAL,
            protected_profile_ttl: PROTECTED_PROFILE_TTL,
            background_tick: BACKGROUND_TICK,
        }
    }

    /// Checks the values a user sets; the error names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.cluster_name.is_empty() {
            return Err("the cluster name is empty".into());
        }
        if !(0.0..1.0).contains(&self.vm_memory_overhead) || self.vm_memory_overhead.is_nan() {
            return Err(format!(
                "the VM memory overhead {} is not a fraction in [0, 1)",
                self.vm_memory_overhead
            ));
        }
        if self.reserved_enis < 0 {
            return Err(format!("reserved ENIs {} is negative", self.reserved_enis));
        }
        let root = &self.ssm_parameter_root;
        if !root.starts_with('/') || root.ends_with('/') || root.len() < 2 {
            return Err(format!(
                "the SSM parameter root {root:?} must start with '/' and not end with one (e.g. /aws/service)"
            ));
        }
        if let Some(v) = &self.kubernetes_version
            && parse_minor(v).is_none()
        {
            return Err(format!(
                "the Kubernetes version {v:?} is not MAJOR.MINOR (e.g. 1.34)"
            ));
        }
        Ok(())
    }

    /// The SDK configuration: the usual chain with this config's region
    /// and endpoint overrides, SDK retries disabled, bounded timeouts, and
    /// credentials that load again when AWS says they expired
    /// ([`super::credentials`]).
    pub async fn sdk_config(&self) -> SdkConfig {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_timeout(OPERATION_TIMEOUT)
                    .connect_timeout(CONNECT_TIMEOUT)
                    .build(),
            );
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url.clone());
        }
        super::credentials::refreshing(&loader.load().await)
    }
}

/// `MAJOR.MINOR` of a version string (`1.34`, `v1.34.2-eks-abc`), or `None`.
pub fn parse_minor(version: &str) -> Option<(u32, u32)> {
    let v = version.trim().trim_start_matches('v');
    let mut parts = v.split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// The Kubernetes version of the API server `client` talks to, as
/// `MAJOR.MINOR` (EKS reports minors like `34+`).
pub async fn kubernetes_version(client: &kube::Client) -> Result<String, String> {
    let info = client
        .apiserver_version()
        .await
        .map_err(|e| format!("reading the API server's version: {e}"))?;
    let minor: String = info
        .minor
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let text = format!("{}.{minor}", info.major);
    parse_minor(&text)
        .map(|(a, b)| format!("{a}.{b}"))
        .ok_or_else(|| format!("the API server reports version {text:?}"))
}

/// The region whose Pricing API endpoint serves `region`'s prices: the
/// API is only in us-east-1, eu-central-1 and ap-south-1 (and
/// cn-northwest-1 for the China partition).
pub fn pricing_region(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("ap-") {
        "ap-south-1"
    } else if ["eu-", "me-", "af-", "il-"]
        .iter()
        .any(|p| region.starts_with(p))
    {
        "eu-central-1"
    } else {
        "us-east-1"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_as_major_minor() {
        assert_eq!(parse_minor("1.34"), Some((1, 34)));
        assert_eq!(parse_minor("v1.33.4-eks-1234"), Some((1, 33)));
        assert_eq!(parse_minor("1.30+"), Some((1, 30)));
        assert_eq!(parse_minor("latest"), None);
        assert_eq!(parse_minor("1"), None);
    }

    #[test]
    fn validation_names_the_bad_setting() {
        let ok = AwsConfig::new("prod");
        assert_eq!(ok.validate(), Ok(()));
        let mut c = ok.clone();
        c.vm_memory_overhead = 1.5;
        assert!(c.validate().unwrap_err().contains("memory overhead"));
        let mut c = ok.clone();
        c.ssm_parameter_root = "aws/service/".into();
        assert!(c.validate().unwrap_err().contains("SSM parameter root"));
        let mut c = ok.clone();
        c.kubernetes_version = Some("one".into());
        assert!(c.validate().unwrap_err().contains("Kubernetes version"));
        let mut c = ok;
        c.cluster_name.clear();
        assert!(c.validate().is_err());
    }

    #[test]
    fn pricing_endpoints_by_partition_and_geography() {
        assert_eq!(pricing_region("us-west-2"), "us-east-1");
        assert_eq!(pricing_region("eu-west-1"), "eu-central-1");
        assert_eq!(pricing_region("ap-northeast-1"), "ap-south-1");
        assert_eq!(pricing_region("cn-north-1"), "cn-northwest-1");
    }

    #[tokio::test]
    async fn the_kubernetes_version_comes_from_the_api_server() {
        use http::{Request, Response};
        use kube::client::Body;
        let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(svc, "default");
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("a request");
            assert_eq!(req.uri().path(), "/version");
            let body = serde_json::json!({
                "major": "1", "minor": "33+", "gitVersion": "v1.33.4-eks-e386d34",
                "gitCommit": "", "gitTreeState": "", "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64"
            });
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&body).expect("json")))
                    .expect("response"),
            );
        });
        assert_eq!(kubernetes_version(&client).await, Ok("1.33".to_string()));
        server.await.expect("server");
    }
}
