//! EC2 instance types as the scheduler sees them: DescribeInstanceTypes
//! facts turned into labels, capacity, overhead and allocatable, for the
//! kubelet a node class configures.
//!
//! # Capacity
//! - `cpu`: the default vCPUs.
//! - `memory`: the type's memory, less 64 MiB on Graviton (arm64, the
//!   firmware's reserved region), less the VM overhead (7.5% by default,
//!   rounded up to whole MiB).
//! - `pods`: the kubelet's `maxPods` if set; otherwise, for families with
//!   ENI-limited pod density (all but Windows, which gets 110),
//!   `(ENIs of the default network card − reserved ENIs) × (IPv4 addresses
//!   per ENI − 1) + 2`; then at most `podsPerCore × vCPUs` where the family
//!   honours `podsPerCore` (not Bottlerocket).
//! - `ephemeral-storage`: with `instanceStorePolicy: RAID0` and local NVMe,
//!   the NVMe size; else the root volume of `blockDeviceMappings` (the one
//!   marked `rootVolume`, else the family's data device: `/dev/xvda`, for
//!   Bottlerocket `/dev/xvdb`, for Windows `/dev/sda1`; for Custom the last
//!   mapping); else 20Gi (Windows 50Gi).
//! - accelerators: `nvidia.com/gpu`, `amd.com/gpu`, `habana.ai/gaudi` by GPU
//!   manufacturer, `aws.amazon.com/neuron` (devices) and
//!   `aws.amazon.com/neuroncore` (their cores), `vpc.amazonaws.com/efa`
//!   (attached only to a node whose NodeClaim requests it: see
//!   [`super::launch`]).
//! - `vpc.amazonaws.com/pod-eni`: the branch interfaces (security groups
//!   for pods) of types that support ENI trunking. EC2 does not report
//!   them; they come from `builtin-pod-eni.json`, generated from the
//!   published catalog (`../shared/data/aws-catalog.json`) by a test, as
//!   the built-in prices are. A type it lacks advertises none.
//! - Windows: `vpc.amazonaws.com/PrivateIPv4Address`, the secondary IPv4
//!   addresses of the primary interface (IPv4 per ENI − 1), which the VPC
//!   resource controller hands to Windows pods (Karpenter's
//!   `privateIPv4Address`).
//!
//! # Overhead
//! - kube-reserved: cpu by tiers of the vCPUs (6% of the first core, 1% of
//!   the second, 0.5% of the third and fourth, 0.25% of the rest, each
//!   tier truncated to whole millicores), memory `11Mi × pods + 255Mi`
//!   (AL2023, AL2 and Custom count the ENI-limited pods without reserved
//!   ENIs here, whatever `maxPods` and `--reserved-enis` say, as nodeadm
//!   and the EKS bootstrap do; Bottlerocket and Windows the node's pods),
//!   ephemeral-storage 1Gi; `kubelet.kubeReserved` replaces any of them.
//! - system-reserved: `kubelet.systemReserved`, nothing by default.
//! - eviction threshold: memory 100Mi, ephemeral-storage 10%; an
//!   `evictionHard` signal for `memory.available` or `nodefs.available`
//!   replaces it, a percentage taken of the capacity (`100%` disables it:
//!   0). `evictionSoft` is only a warning threshold and takes nothing from
//!   allocatable.
//!
//! Allocatable is capacity less the three, never below zero.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::InstanceTypeInfo;

use crate::api::EC2NodeClass;
use crate::api::ec2nodeclass::{AmiFamily, InstanceStorePolicy};
use crate::cloud::select::Hardware;
use crate::model::labels::{ARCH, CAPACITY_TYPE, INSTANCE_TYPE, OS, REGION, ZONE};
use crate::model::quantity::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS, parse_quantity};
use crate::model::{InstanceType, Offering, Overhead, Requirement, Requirements, Resources};

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;
/// Graviton firmware keeps this much memory from the OS.
const ARM64_RESERVED_MIB: i64 = 64;
/// Pods per node where density is not ENI-limited (Windows).
const DEFAULT_MAX_PODS: i64 = 110;
/// The root (or data) volume when the node class maps none.
const DEFAULT_VOLUME: i64 = 20 * GIB;
const DEFAULT_WINDOWS_VOLUME: i64 = 50 * GIB;
/// Kube-reserved memory: this per pod...
const RESERVED_MIB_PER_POD: i64 = 11;
/// ...plus this.
const RESERVED_MIB_BASE: i64 = 255;
/// The kubelet's default hard eviction thresholds.
const EVICTION_MEMORY: i64 = 100 * MIB;
const EVICTION_NODEFS_PERCENT: f64 = 10.0;
/// Kube-reserved ephemeral storage.
const RESERVED_EPHEMERAL: i64 = GIB;
/// Kube-reserved cpu: (tier start, tier end, fraction) in millicores.
const CPU_TIERS: [(i64, i64, f64); 4] = [
    (0, 1000, 0.06),
    (1000, 2000, 0.01),
    (2000, 4000, 0.005),
    (4000, i64::MAX, 0.0025),
];

pub const LABEL_PREFIX: &str = "karpenter.k8s.aws/instance-";
/// The tenancy an instance runs with: `default` or `dedicated`.
pub const LABEL_TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";
pub const TENANCY_DEFAULT: &str = "default";
pub const TENANCY_DEDICATED: &str = "dedicated";
/// The zone's id (`use1-az1`), the same in every account, unlike its name.
pub const LABEL_ZONE_ID: &str = crate::model::labels::ZONE_ID;

/// GPUs of one kind (`count` 0 for a fraction of one).
#[derive(Debug, Clone, PartialEq)]
pub struct Gpus {
    pub name: String,
    pub manufacturer: String,
    pub count: i64,
    pub memory_mib: i64,
}

/// Neuron (Inferentia, Trainium) devices.
#[derive(Debug, Clone, PartialEq)]
pub struct Neuron {
    pub name: String,
    pub count: i64,
    pub cores: i64,
}

/// The facts of an instance type dovetail uses, from DescribeInstanceTypes.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeInfo {
    pub name: String,
    pub vcpus: i64,
    pub memory_mib: i64,
    /// `amd64` or `arm64`.
    pub arch: String,
    pub cpu_manufacturer: Option<String>,
    pub clock_mhz: Option<i64>,
    /// `nitro`, `xen`, or empty (bare metal).
    pub hypervisor: String,
    /// Network interfaces of the default network card.
    pub max_enis: i64,
    pub ipv4_per_eni: i64,
    pub efa: i64,
    pub encryption_in_transit: bool,
    pub network_bandwidth_mbps: Option<i64>,
    pub ebs_bandwidth_mbps: Option<i64>,
    pub local_nvme_gb: Option<i64>,
    pub gpus: Option<Gpus>,
    pub neuron: Option<Neuron>,
    pub on_demand: bool,
    pub spot: bool,
    /// What Karpenter's node class compatibility checks read.
    pub hardware: Hardware,
}

/// `Radeon Pro V520` -> `radeon-pro-v520`.
fn kebab(s: &str) -> String {
    s.trim()
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join("-")
}

impl TypeInfo {
    /// The facts of a DescribeInstanceTypes entry, or `None` for a type
    /// nodes cannot use: no vCPU, memory or network facts, or neither
    /// x86_64 nor arm64 among its architectures (Mac instances).
    pub fn from_sdk(info: &InstanceTypeInfo) -> Option<TypeInfo> {
        let name = info.instance_type()?.as_str().to_string();
        let vcpus = i64::from(info.v_cpu_info()?.default_v_cpus()?);
        let memory_mib = info.memory_info()?.size_in_mib()?;
        let processor = info.processor_info()?;
        // Older types list i386 beside x86_64; Mac types list only their own.
        let archs: Vec<&str> = processor
            .supported_architectures()
            .iter()
            .map(|a| a.as_str())
            .collect();
        let arch = if archs.contains(&"x86_64") {
            "amd64"
        } else if archs.contains(&"arm64") {
            "arm64"
        } else {
            return None;
        };
        let network = info.network_info()?;
        let card = usize::try_from(network.default_network_card_index().unwrap_or(0)).ok()?;
        let max_enis = network
            .network_cards()
            .iter()
            .find(|c| c.network_card_index().and_then(|i| usize::try_from(i).ok()) == Some(card))
            .or_else(|| network.network_cards().get(card))
            .and_then(|c| c.maximum_network_interfaces())
            .or(network.maximum_network_interfaces())?;
        let bandwidth: f64 = network
            .network_cards()
            .iter()
            .filter_map(|c| c.baseline_bandwidth_in_gbps())
            .sum();
        let gpus = info
            .gpu_info()
            .and_then(|g| g.gpus().first())
            .and_then(|g| {
                Some(Gpus {
                    name: kebab(g.name()?),
                    manufacturer: g.manufacturer()?.to_lowercase(),
                    count: i64::from(g.count()?),
                    memory_mib: g
                        .memory_info()
                        .and_then(|m| m.size_in_mib())
                        .map_or(0, i64::from),
                })
            });
        let neuron = info
            .neuron_info()
            .and_then(|n| {
                let devices = n.neuron_devices();
                let first = devices.first()?;
                let count: i64 = devices
                    .iter()
                    .filter_map(|d| d.count())
                    .map(i64::from)
                    .sum();
                let cores: i64 = devices
                    .iter()
                    .map(|d| {
                        i64::from(d.count().unwrap_or(0))
                            * i64::from(d.core_info().and_then(|c| c.count()).unwrap_or(0))
                    })
                    .sum();
                Some(Neuron {
                    name: kebab(first.name()?),
                    count,
                    cores,
                })
            })
            .filter(|n| n.count > 0);
        let classes: Vec<&str> = info
            .supported_usage_classes()
            .iter()
            .map(|c| c.as_str())
            .collect();
        let mut network_cards = Vec::new();
        for c in network.network_cards() {
            let (Some(index), Some(max)) = (
                c.network_card_index().and_then(|i| usize::try_from(i).ok()),
                c.maximum_network_interfaces(),
            ) else {
                continue;
            };
            if network_cards.len() <= index {
                network_cards.resize(index + 1, 0);
            }
            network_cards[index] = i64::from(max);
        }
        let hardware = Hardware {
            network_cards,
            ena: network
                .ena_support()
                .is_some_and(|e| *e != aws_sdk_ec2::types::EnaSupport::Unsupported),
            max_efa_interfaces: network
                .efa_info()
                .and_then(|e| e.maximum_efa_interfaces())
                .map_or(0, i64::from),
            nested_virtualization: processor.supported_features().iter().any(|f| {
                *f == aws_sdk_ec2::types::SupportedAdditionalProcessorFeature::NestedVirtualization
            }),
            placement_strategies: info
                .placement_group_info()
                .map(|p| {
                    p.supported_strategies()
                        .iter()
                        .map(|s| s.as_str().to_string())
                        .collect()
                })
                .unwrap_or_default(),
        };
        Some(TypeInfo {
            hardware,
            name,
            vcpus,
            memory_mib,
            arch: arch.to_string(),
            cpu_manufacturer: processor.manufacturer().map(str::to_lowercase),
            clock_mhz: processor
                .sustained_clock_speed_in_ghz()
                .map(|ghz| (ghz * 1000.0).round() as i64),
            hypervisor: info
                .hypervisor()
                .map(|h| h.as_str().to_string())
                .unwrap_or_default(),
            max_enis: i64::from(max_enis),
            ipv4_per_eni: i64::from(network.ipv4_addresses_per_interface()?),
            efa: network
                .efa_info()
                .and_then(|e| e.maximum_efa_interfaces())
                .map_or(0, i64::from),
            encryption_in_transit: network.encryption_in_transit_supported().unwrap_or(false),
            network_bandwidth_mbps: (bandwidth > 0.0).then(|| (bandwidth * 1000.0).round() as i64),
            ebs_bandwidth_mbps: info
                .ebs_info()
                .and_then(|e| e.ebs_optimized_info())
                .and_then(|o| o.maximum_bandwidth_in_mbps())
                .map(i64::from),
            local_nvme_gb: info
                .instance_storage_info()
                .filter(|s| {
                    s.nvme_support()
                        .is_some_and(|n| n.as_str() != "unsupported")
                })
                .and_then(|s| s.total_size_in_gb()),
            gpus,
            neuron,
            on_demand: classes.contains(&"on-demand"),
            spot: classes.contains(&"spot"),
        })
    }

    /// `(max ENIs − reserved) × (IPv4 per ENI − 1) + 2`, or 0 when fewer
    /// ENIs than reserved.
    pub fn eni_limited_pods(&self, reserved_enis: i64) -> i64 {
        let usable = self.max_enis - reserved_enis;
        if usable < 0 {
            return 0;
        }
        usable * (self.ipv4_per_eni - 1).max(0) + 2
    }

    /// The well-known labels of the type (zone and capacity type aside).
    pub fn labels(&self, region: &str, os: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            out.insert(k.to_string(), v);
        };
        put(INSTANCE_TYPE, self.name.clone());
        put(ARCH, self.arch.clone());
        put(OS, os.to_string());
        put(REGION, region.to_string());
        let (family, size) = self.name.split_once('.').unwrap_or((&self.name, ""));
        let l = |s: &str| format!("{LABEL_PREFIX}{s}");
        let (category, generation) = category_and_generation(family);
        put(&l("category"), category);
        if let Some(g) = generation {
            put(&l("generation"), g);
        }
        put(&l("family"), family.to_string());
        put(&l("size"), size.to_string());
        put(&l("cpu"), self.vcpus.to_string());
        put(&l("memory"), self.memory_mib.to_string());
        put(&l("hypervisor"), self.hypervisor.clone());
        put(
            &l("encryption-in-transit-supported"),
            self.encryption_in_transit.to_string(),
        );
        put(&l("capability-flex"), family.ends_with("-flex").to_string());
        if let Some(m) = &self.cpu_manufacturer {
            put(&l("cpu-manufacturer"), m.clone());
        }
        if let Some(mhz) = self.clock_mhz {
            put(&l("cpu-sustained-clock-speed-mhz"), mhz.to_string());
        }
        if let Some(b) = self.network_bandwidth_mbps {
            put(&l("network-bandwidth"), b.to_string());
        }
        if let Some(b) = self.ebs_bandwidth_mbps {
            put(&l("ebs-bandwidth"), b.to_string());
        }
        if let Some(gb) = self.local_nvme_gb {
            put(&l("local-nvme"), gb.to_string());
        }
        if let Some(g) = &self.gpus {
            put(&l("gpu-name"), g.name.clone());
            put(&l("gpu-manufacturer"), g.manufacturer.clone());
            put(&l("gpu-count"), g.count.to_string());
            put(&l("gpu-memory"), g.memory_mib.to_string());
        }
        if let Some(n) = &self.neuron {
            put(&l("accelerator-name"), n.name.clone());
            put(&l("accelerator-manufacturer"), "aws".to_string());
            put(&l("accelerator-count"), n.count.to_string());
        }
        out
    }
}

/// The category (leading letters) and generation (the digits after them,
/// past a `-<n>tb` memory size as in `u-6tb1`) of an instance family.
fn category_and_generation(family: &str) -> (String, Option<String>) {
    let category: String = family
        .chars()
        .take_while(char::is_ascii_lowercase)
        .collect();
    let mut rest = &family[category.len()..];
    if let Some(after) = rest.strip_prefix('-') {
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 && after[digits..].starts_with("tb") {
            rest = &after[digits + 2..];
        }
    }
    let generation: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (category, (!generation.is_empty()).then_some(generation))
}

/// What an AMI family changes in the computation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Al2,
    Al2023,
    Bottlerocket,
    Windows,
    Custom,
}

impl Family {
    pub fn of(nodeclass: &EC2NodeClass) -> Family {
        match nodeclass.resolved_ami_family() {
            Some(AmiFamily::AL2) => Family::Al2,
            Some(AmiFamily::AL2023) | None => Family::Al2023,
            Some(AmiFamily::Bottlerocket) => Family::Bottlerocket,
            Some(AmiFamily::Custom) => Family::Custom,
            Some(AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025) => {
                Family::Windows
            }
        }
    }

    /// Whether max pods default to the ENI limit (else 110).
    fn eni_limited_pods(self) -> bool {
        self != Family::Windows
    }

    /// Whether kube-reserved memory counts the ENI-limited pods rather than
    /// the node's max pods.
    fn eni_limited_memory(self) -> bool {
        matches!(self, Family::Al2 | Family::Al2023 | Family::Custom)
    }

    /// Bottlerocket has no `pods-per-core` setting.
    fn pods_per_core(self) -> bool {
        self != Family::Bottlerocket
    }

    /// The device whose volume holds the node's ephemeral storage.
    fn data_device(self) -> &'static str {
        match self {
            Family::Bottlerocket => "/dev/xvdb",
            Family::Windows => "/dev/sda1",
            _ => "/dev/xvda",
        }
    }

    pub fn os(self) -> &'static str {
        if self == Family::Windows {
            "windows"
        } else {
            "linux"
        }
    }
}

/// An eviction threshold: absolute, or a percentage of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Threshold {
    Absolute(i64),
    Percent(f64),
}

impl Threshold {
    fn parse(resource: &str, s: &str) -> Result<Threshold, String> {
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("{s:?} is not a percentage"))?;
            if !(0.0..=100.0).contains(&v) {
                return Err(format!("{s:?} is not a percentage"));
            }
            return Ok(Threshold::Percent(v));
        }
        parse_quantity(resource, s)
            .map(Threshold::Absolute)
            .map_err(|e| e.to_string())
    }

    fn of(self, capacity: i64) -> i64 {
        match self {
            Threshold::Absolute(v) => v,
            // 100% is the kubelet's way to turn a threshold off.
            Threshold::Percent(p) if p >= 100.0 => 0,
            Threshold::Percent(p) => (capacity as f64 / 100.0 * p).ceil() as i64,
        }
    }
}

/// What a node class sets that changes an instance type's resources.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClassSettings {
    pub family: Family,
    max_pods: Option<i64>,
    pods_per_core: Option<i64>,
    kube_reserved: Resources,
    system_reserved: Resources,
    /// Resource -> hard eviction threshold.
    eviction_hard: BTreeMap<String, Threshold>,
    root_volume: Option<i64>,
    raid0: bool,
}

impl NodeClassSettings {
    /// Reads the settings of a node class; an error names the field.
    pub fn of(nodeclass: &EC2NodeClass) -> Result<NodeClassSettings, String> {
        let family = Family::of(nodeclass);
        let spec = &nodeclass.spec;
        let kubelet = spec.kubelet.clone().unwrap_or_default();
        let reserved = |map: &Option<BTreeMap<String, String>>, field: &str| {
            let mut r = Resources::new();
            for (k, v) in map.iter().flatten() {
                if k == "pid" {
                    continue;
                }
                r.set(
                    k,
                    parse_quantity(k, v).map_err(|e| format!("spec.kubelet.{field}.{k}: {e}"))?,
                );
            }
            Ok::<_, String>(r)
        };
        let thresholds = |map: &Option<BTreeMap<String, String>>, field: &str| {
            let mut out = BTreeMap::new();
            for (signal, v) in map.iter().flatten() {
                let resource = match signal.as_str() {
                    "memory.available" => MEMORY,
                    "nodefs.available" => EPHEMERAL_STORAGE,
                    _ => continue,
                };
                let t = Threshold::parse(resource, v)
                    .map_err(|e| format!("spec.kubelet.{field}.{signal}: {e}"))?;
                out.insert(resource.to_string(), t);
            }
            Ok::<_, String>(out)
        };
        let mappings = spec.block_device_mappings.as_deref().unwrap_or_default();
        let size = |i: usize| -> Result<Option<i64>, String> {
            let Some(s) = mappings[i]
                .ebs
                .as_ref()
                .and_then(|e| e.volume_size.as_deref())
            else {
                return Ok(None);
            };
            parse_quantity(EPHEMERAL_STORAGE, s)
                .map(Some)
                .map_err(|e| format!("spec.blockDeviceMappings[{i}].ebs.volumeSize: {e}"))
        };
        let root = mappings.iter().position(|m| m.root_volume == Some(true));
        let data = mappings
            .iter()
            .position(|m| m.device_name.as_deref() == Some(family.data_device()));
        let chosen = match (root, family) {
            (Some(i), _) => Some(i),
            (None, Family::Custom) => mappings.len().checked_sub(1),
            (None, _) => data,
        };
        Ok(NodeClassSettings {
            family,
            max_pods: kubelet.max_pods.map(i64::from),
            pods_per_core: kubelet.pods_per_core.map(i64::from),
            kube_reserved: reserved(&kubelet.kube_reserved, "kubeReserved")?,
            system_reserved: reserved(&kubelet.system_reserved, "systemReserved")?,
            eviction_hard: thresholds(&kubelet.eviction_hard, "evictionHard")?,
            root_volume: chosen.map(size).transpose()?.flatten(),
            raid0: spec.instance_store_policy == Some(InstanceStorePolicy::RAID0),
        })
    }

    /// The max pods of a node of `info` (see the module documentation).
    pub fn max_pods(&self, info: &TypeInfo, reserved_enis: i64) -> i64 {
        let mut pods = match self.max_pods {
            Some(m) => m,
            None if self.family.eni_limited_pods() => info.eni_limited_pods(reserved_enis),
            None => DEFAULT_MAX_PODS,
        };
        if let Some(ppc) = self.pods_per_core
            && ppc > 0
            && self.family.pods_per_core()
        {
            pods = pods.min(ppc.saturating_mul(info.vcpus));
        }
        pods
    }
}

/// Provider-wide settings of the computation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overheads {
    /// The fraction of memory the VM keeps (0.075).
    pub vm_memory_overhead: f64,
    pub reserved_enis: i64,
}

/// Kube-reserved cpu for `millis` of capacity.
fn reserved_cpu(millis: i64) -> i64 {
    CPU_TIERS
        .iter()
        .filter(|(start, _, _)| millis >= *start)
        .map(|(start, end, fraction)| {
            let span = millis.min(*end) - start;
            (span as f64 * fraction) as i64
        })
        .sum()
}

/// The capacity of a node of `info` under `settings`.
pub fn capacity(info: &TypeInfo, settings: &NodeClassSettings, o: &Overheads) -> Resources {
    let mut c = Resources::new();
    c.set(CPU, info.vcpus * 1000);
    let mut mib = info.memory_mib;
    if info.arch == "arm64" {
        mib -= ARM64_RESERVED_MIB;
    }
    mib -= (mib as f64 * o.vm_memory_overhead).ceil() as i64;
    c.set(MEMORY, mib.max(0) * MIB);
    c.set(PODS, settings.max_pods(info, o.reserved_enis));
    let storage = match (settings.raid0, info.local_nvme_gb, settings.root_volume) {
        (true, Some(gb), _) => gb * 1_000_000_000,
        (_, _, Some(bytes)) => bytes,
        _ if settings.family == Family::Windows => DEFAULT_WINDOWS_VOLUME,
        _ => DEFAULT_VOLUME,
    };
    c.set(EPHEMERAL_STORAGE, storage);
    if let Some(g) = &info.gpus {
        let resource = match g.manufacturer.as_str() {
            "nvidia" => Some("nvidia.com/gpu"),
            "amd" => Some("amd.com/gpu"),
            "habana" => Some("habana.ai/gaudi"),
            _ => None,
        };
        // Fractional GPUs (g6f: a share of one) report a count of 0: the
        // labels describe them, but there is no whole device to request.
        if let (Some(r), true) = (resource, g.count > 0) {
            c.set(r, g.count);
        }
    }
    if let Some(n) = &info.neuron {
        c.set("aws.amazon.com/neuron", n.count);
        if n.cores > 0 {
            c.set("aws.amazon.com/neuroncore", n.cores);
        }
    }
    if info.efa > 0 {
        c.set("vpc.amazonaws.com/efa", info.efa);
    }
    if let Some(n) = pod_eni(&info.name).filter(|n| *n > 0) {
        c.set(POD_ENI, n);
    }
    if settings.family == Family::Windows {
        c.set(PRIVATE_IPV4_ADDRESS, (info.ipv4_per_eni - 1).max(0));
    }
    c
}

/// Security groups for pods: the branch interfaces a node offers.
pub const POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
const BUILTIN_POD_ENI: &str = include_str!("builtin-pod-eni.json");

/// The branch interfaces of an instance type (`builtin-pod-eni.json`).
pub fn pod_eni(instance_type: &str) -> Option<i64> {
    static TABLE: std::sync::OnceLock<BTreeMap<String, i64>> = std::sync::OnceLock::new();
    TABLE
        .get_or_init(|| {
            serde_json::from_str::<serde_json::Value>(BUILTIN_POD_ENI)
                .ok()
                .and_then(|v| serde_json::from_value(v["pod_eni"].clone()).ok())
                .unwrap_or_default()
        })
        .get(instance_type)
        .copied()
}

/// The Windows pods' addresses the VPC resource controller advertises.
pub const PRIVATE_IPV4_ADDRESS: &str = "vpc.amazonaws.com/PrivateIPv4Address";

/// The overhead of a node of `info` with `capacity` (see the module
/// documentation).
pub fn overhead(info: &TypeInfo, capacity: &Resources, settings: &NodeClassSettings) -> Overhead {
    let pods = if settings.family.eni_limited_memory() {
        info.eni_limited_pods(0)
    } else {
        capacity.get(PODS)
    };
    let mut kube = Resources::new();
    kube.set(CPU, reserved_cpu(capacity.get(CPU)));
    kube.set(
        MEMORY,
        (RESERVED_MIB_PER_POD * pods + RESERVED_MIB_BASE) * MIB,
    );
    kube.set(EPHEMERAL_STORAGE, RESERVED_EPHEMERAL);
    for (k, v) in &settings.kube_reserved.0 {
        kube.set(k, *v);
    }
    let mut eviction = Resources::new();
    eviction.set(MEMORY, EVICTION_MEMORY);
    eviction.set(
        EPHEMERAL_STORAGE,
        Threshold::Percent(EVICTION_NODEFS_PERCENT).of(capacity.get(EPHEMERAL_STORAGE)),
    );
    for (resource, t) in &settings.eviction_hard {
        eviction.set(resource, t.of(capacity.get(resource)));
    }
    Overhead {
        kube_reserved: kube,
        system_reserved: settings.system_reserved.clone(),
        eviction_threshold: eviction,
    }
}

/// The instance type as the scheduler sees it: labels, capacity, overhead,
/// allocatable and `offerings` (whose zones and capacity types become its
/// requirements).
pub fn instance_type(
    info: &TypeInfo,
    settings: &NodeClassSettings,
    o: &Overheads,
    region: &str,
    offerings: Vec<Offering>,
) -> InstanceType {
    let capacity = capacity(info, settings, o);
    let overhead = overhead(info, &capacity, settings);
    let mut allocatable = capacity.clone();
    allocatable.sub(&overhead.total());
    for v in allocatable.0.values_mut() {
        *v = (*v).max(0);
    }
    let mut requirements = Requirements::from_labels(&info.labels(region, settings.family.os()));
    let zones: BTreeSet<&str> = offerings.iter().map(|o| o.zone.as_str()).collect();
    let types: BTreeSet<&str> = offerings.iter().map(|o| o.capacity_type.as_str()).collect();
    requirements.add(ZONE, Requirement::in_values(zones));
    requirements.add(CAPACITY_TYPE, Requirement::in_values(types));
    // Either tenancy can launch (a dedicated one through the launch
    // template's placement), as in Karpenter.
    requirements.add(
        LABEL_TENANCY,
        Requirement::in_values([TENANCY_DEFAULT, TENANCY_DEDICATED]),
    );
    InstanceType {
        name: info.name.clone(),
        requirements,
        capacity,
        overhead,
        allocatable,
        offerings,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::ec2nodeclass::{BlockDevice, BlockDeviceMapping, KubeletConfiguration};

    /// m5.large as DescribeInstanceTypes reports it.
    pub(crate) fn m5_large() -> TypeInfo {
        TypeInfo {
            name: "m5.large".into(),
            vcpus: 2,
            memory_mib: 8192,
            arch: "amd64".into(),
            cpu_manufacturer: Some("intel".into()),
            clock_mhz: Some(3100),
            hypervisor: "nitro".into(),
            max_enis: 3,
            ipv4_per_eni: 10,
            efa: 0,
            encryption_in_transit: false,
            network_bandwidth_mbps: Some(750),
            ebs_bandwidth_mbps: Some(4750),
            local_nvme_gb: None,
            gpus: None,
            neuron: None,
            on_demand: true,
            spot: true,
            hardware: Hardware {
                network_cards: vec![3],
                ena: true,
                max_efa_interfaces: 0,
                nested_virtualization: false,
                placement_strategies: ["cluster", "partition", "spread"]
                    .map(String::from)
                    .to_vec(),
            },
        }
    }

    pub(crate) const OVERHEADS: Overheads = Overheads {
        vm_memory_overhead: 0.075,
        reserved_enis: 0,
    };

    fn settings(class: &EC2NodeClass) -> NodeClassSettings {
        NodeClassSettings::of(class).expect("valid settings")
    }

    /// The type as a node of `class` in us-east-1 sees it (no offerings).
    fn node(info: &TypeInfo, class: &EC2NodeClass) -> InstanceType {
        instance_type(info, &settings(class), &OVERHEADS, "us-east-1", vec![])
    }

    fn alloc(it: &InstanceType, r: &str) -> i64 {
        it.allocatable.get(r)
    }

    #[test]
    fn m5_large_matches_the_published_al2023_allocatable() {
        let class = EC2NodeClass::test("default");
        let it = node(&m5_large(), &class);
        assert_eq!(alloc(&it, CPU), 1930);
        assert_eq!(alloc(&it, MEMORY), 6903 * MIB);
        assert_eq!(alloc(&it, PODS), 29);
        assert_eq!(alloc(&it, EPHEMERAL_STORAGE), 17 * GIB);
        assert_eq!(it.capacity.get(MEMORY), 7577 * MIB);
        let labels = it.requirements.labels();
        assert_eq!(labels["karpenter.k8s.aws/instance-category"], "m");
        assert_eq!(labels["karpenter.k8s.aws/instance-generation"], "5");
        assert_eq!(labels["karpenter.k8s.aws/instance-size"], "large");
        assert_eq!(labels["kubernetes.io/os"], "linux");
    }

    #[test]
    fn graviton_keeps_64mib_and_cpu_tiers_truncate_per_tier() {
        let mut info = m5_large();
        info.name = "m6g.large".into();
        info.arch = "arm64".into();
        let class = EC2NodeClass::test("default");
        let it = node(&info, &class);
        // (8192 - 64) - ceil(8128 * 0.075) - (11 * 29 + 255) - 100
        assert_eq!(alloc(&it, MEMORY), (8128 - 610 - 574 - 100) * MIB);
        assert_eq!(reserved_cpu(1000), 60);
        assert_eq!(reserved_cpu(2000), 70);
        assert_eq!(reserved_cpu(4000), 80);
        assert_eq!(reserved_cpu(96_000), 310);
        assert_eq!(reserved_cpu(500), 30);
    }

    #[test]
    fn kubelet_settings_replace_defaults() {
        let mut class = EC2NodeClass::test("default");
        class.spec.kubelet = Some(KubeletConfiguration {
            max_pods: Some(110),
            kube_reserved: Some(BTreeMap::from([("cpu".into(), "200m".into())])),
            system_reserved: Some(BTreeMap::from([("memory".into(), "100Mi".into())])),
            eviction_hard: Some(BTreeMap::from([("memory.available".into(), "5%".into())])),
            eviction_soft: Some(BTreeMap::from([(
                "memory.available".into(),
                "500Mi".into(),
            )])),
            ..KubeletConfiguration::default()
        });
        let it = node(&m5_large(), &class);
        assert_eq!(alloc(&it, PODS), 110);
        assert_eq!(alloc(&it, CPU), 1800);
        // Regression: AL2023 counted the configured max pods (110) in
        // kube-reserved memory, and subtracted the soft threshold (500Mi)
        // because it beat the hard one. nodeadm reserves for the ENI-limited
        // pods (29 on m5.large), and a soft threshold only warns: the hard
        // one, 5% of 7577Mi, is what allocatable loses.
        assert_eq!(it.overhead.kube_reserved.get(MEMORY), (11 * 29 + 255) * MIB);
        let hard = (7577.0 * MIB as f64 * 0.05).ceil() as i64;
        assert_eq!(it.overhead.eviction_threshold.get(MEMORY), hard);
        assert_eq!(
            alloc(&it, MEMORY),
            (7577 - (11 * 29 + 255) - 100) * MIB - hard
        );
        // Reserved ENIs shrink the pods, not the memory reserved for them.
        let reserved = Overheads {
            reserved_enis: 1,
            ..OVERHEADS
        };
        class.spec.kubelet.as_mut().unwrap().max_pods = None;
        let it = instance_type(
            &m5_large(),
            &settings(&class),
            &reserved,
            "us-east-1",
            vec![],
        );
        assert_eq!(alloc(&it, PODS), 2 * 9 + 2);
        assert_eq!(it.overhead.kube_reserved.get(MEMORY), (11 * 29 + 255) * MIB);
        // Bottlerocket reserves for the node's pods; 100% turns a
        // threshold off.
        class.spec.ami_family = Some(AmiFamily::Bottlerocket);
        class.spec.ami_selector_terms[0].alias = Some("bottlerocket@latest".into());
        class.spec.kubelet.as_mut().unwrap().max_pods = Some(110);
        class.spec.kubelet.as_mut().unwrap().eviction_hard =
            Some(BTreeMap::from([("memory.available".into(), "100%".into())]));
        let it = node(&m5_large(), &class);
        assert_eq!(
            it.overhead.kube_reserved.get(MEMORY),
            (11 * 110 + 255) * MIB
        );
        assert_eq!(it.overhead.eviction_threshold.get(MEMORY), 0);

        // podsPerCore caps pods, but not on Bottlerocket (no such setting).
        class.spec.kubelet = Some(KubeletConfiguration {
            pods_per_core: Some(4),
            ..KubeletConfiguration::default()
        });
        let it = node(&m5_large(), &class);
        assert_eq!(alloc(&it, PODS), 29);
        class.spec.ami_family = Some(AmiFamily::AL2);
        class.spec.ami_selector_terms[0].alias = Some("al2@latest".into());
        let it = node(&m5_large(), &class);
        assert_eq!(alloc(&it, PODS), 8);
    }

    #[test]
    fn windows_nodes_advertise_their_secondary_ipv4_addresses() {
        let mut class = EC2NodeClass::test("default");
        let linux = node(&m5_large(), &class);
        assert_eq!(linux.capacity.get(PRIVATE_IPV4_ADDRESS), 0);
        assert!(!linux.capacity.0.contains_key(PRIVATE_IPV4_ADDRESS));
        class.spec.ami_family = Some(AmiFamily::Windows2022);
        class.spec.ami_selector_terms[0].alias = Some("windows2022@latest".into());
        let windows = node(&m5_large(), &class);
        // m5.large: 10 IPv4 addresses per interface, the primary's own
        // address aside.
        assert_eq!(windows.capacity.get(PRIVATE_IPV4_ADDRESS), 9);
        assert_eq!(alloc(&windows, PRIVATE_IPV4_ADDRESS), 9);
        let mut big = m5_large();
        big.ipv4_per_eni = 30;
        assert_eq!(node(&big, &class).capacity.get(PRIVATE_IPV4_ADDRESS), 29);
    }

    #[test]
    fn trunking_types_advertise_their_branch_interfaces() {
        let class = EC2NodeClass::test("default");
        // m5.large: 9 branch interfaces, as the published catalog says.
        assert_eq!(pod_eni("m5.large"), Some(9));
        assert_eq!(alloc(&node(&m5_large(), &class), POD_ENI), 9);
        // A type the table lacks advertises none.
        let mut unknown = m5_large();
        unknown.name = "zz9.large".into();
        assert_eq!(pod_eni("zz9.large"), None);
        assert!(!node(&unknown, &class).capacity.0.contains_key(POD_ENI));
    }

    #[test]
    fn root_volumes_and_instance_stores_set_ephemeral_storage() {
        let mut class = EC2NodeClass::test("default");
        class.spec.block_device_mappings = Some(vec![BlockDeviceMapping {
            device_name: Some("/dev/xvda".into()),
            ebs: Some(BlockDevice {
                volume_size: Some("100Gi".into()),
                ..BlockDevice::default()
            }),
            root_volume: None,
        }]);
        let it = node(&m5_large(), &class);
        assert_eq!(it.capacity.get(EPHEMERAL_STORAGE), 100 * GIB);
        assert_eq!(alloc(&it, EPHEMERAL_STORAGE), 89 * GIB);
        let mut info = m5_large();
        info.local_nvme_gb = Some(75);
        class.spec.instance_store_policy = Some(InstanceStorePolicy::RAID0);
        let it = node(&info, &class);
        assert_eq!(it.capacity.get(EPHEMERAL_STORAGE), 75_000_000_000);

        class.spec.block_device_mappings.as_mut().unwrap()[0]
            .ebs
            .as_mut()
            .unwrap()
            .volume_size = Some("lots".into());
        let e = NodeClassSettings::of(&class).unwrap_err();
        assert!(e.contains("blockDeviceMappings[0]"), "{e}");
    }

    #[test]
    fn reserved_enis_and_accelerators() {
        let mut info = m5_large();
        assert_eq!(info.eni_limited_pods(1), 2 * 9 + 2);
        assert_eq!(info.eni_limited_pods(4), 0);
        info.gpus = Some(Gpus {
            name: "a10g".into(),
            manufacturer: "nvidia".into(),
            count: 1,
            memory_mib: 24576,
        });
        info.efa = 1;
        let class = EC2NodeClass::test("default");
        let it = node(&info, &class);
        assert_eq!(alloc(&it, "nvidia.com/gpu"), 1);
        assert_eq!(alloc(&it, "vpc.amazonaws.com/efa"), 1);
        let labels = it.requirements.labels();
        assert_eq!(labels["karpenter.k8s.aws/instance-gpu-name"], "a10g");
        assert_eq!(labels["karpenter.k8s.aws/instance-gpu-count"], "1");

        // A fraction of a GPU (g6f) is labelled but not requestable.
        info.gpus = Some(Gpus {
            name: "l4".into(),
            manufacturer: "nvidia".into(),
            count: 0,
            memory_mib: 2861,
        });
        let it = node(&info, &class);
        assert_eq!(it.capacity.0.get("nvidia.com/gpu"), None);
        let labels = it.requirements.labels();
        assert_eq!(labels["karpenter.k8s.aws/instance-gpu-count"], "0");
        assert_eq!(labels["karpenter.k8s.aws/instance-gpu-memory"], "2861");
    }

    #[test]
    fn families_split_into_category_and_generation() {
        let split = |f: &str| category_and_generation(f);
        assert_eq!(split("m5"), ("m".into(), Some("5".into())));
        assert_eq!(split("x2iedn"), ("x".into(), Some("2".into())));
        assert_eq!(split("u-6tb1"), ("u".into(), Some("1".into())));
        assert_eq!(split("c7i-flex"), ("c".into(), Some("7".into())));
        assert_eq!(split("mac"), ("mac".into(), None));
        assert_eq!(kebab("Radeon Pro V520"), "radeon-pro-v520");
    }

    #[test]
    fn sdk_facts_convert() {
        use aws_sdk_ec2::types::{
            ArchitectureType, GpuDeviceInfo, GpuDeviceMemoryInfo, GpuInfo, InstanceType as Ty,
            InstanceTypeHypervisor, MemoryInfo, NetworkCardInfo, NetworkInfo, ProcessorInfo,
            UsageClassType, VCpuInfo,
        };
        let info = InstanceTypeInfo::builder()
            .instance_type(Ty::G5Xlarge)
            .v_cpu_info(VCpuInfo::builder().default_v_cpus(4).build())
            .memory_info(MemoryInfo::builder().size_in_mib(16384).build())
            .processor_info(
                ProcessorInfo::builder()
                    .supported_architectures(ArchitectureType::X8664)
                    .manufacturer("AMD")
                    .sustained_clock_speed_in_ghz(3.3)
                    .build(),
            )
            .hypervisor(InstanceTypeHypervisor::Nitro)
            .network_info(
                NetworkInfo::builder()
                    .default_network_card_index(0)
                    .maximum_network_interfaces(4)
                    .ipv4_addresses_per_interface(15)
                    .network_cards(
                        NetworkCardInfo::builder()
                            .network_card_index(0)
                            .maximum_network_interfaces(4)
                            .baseline_bandwidth_in_gbps(2.5)
                            .build(),
                    )
                    .build(),
            )
            .gpu_info(
                GpuInfo::builder()
                    .gpus(
                        GpuDeviceInfo::builder()
                            .name("A10G")
                            .manufacturer("NVIDIA")
                            .count(1)
                            .memory_info(GpuDeviceMemoryInfo::builder().size_in_mib(24576).build())
                            .build(),
                    )
                    .build(),
            )
            .supported_usage_classes(UsageClassType::OnDemand)
            .supported_usage_classes(UsageClassType::Spot)
            .build();
        let t = TypeInfo::from_sdk(&info).expect("usable");
        assert_eq!(t.name, "g5.xlarge");
        assert_eq!(t.arch, "amd64");
        assert_eq!(t.eni_limited_pods(0), 58);
        assert_eq!(t.network_bandwidth_mbps, Some(2500));
        assert_eq!(t.clock_mhz, Some(3300));
        assert_eq!(t.cpu_manufacturer.as_deref(), Some("amd"));
        assert!(t.on_demand && t.spot);
        assert_eq!(t.gpus.as_ref().map(|g| g.name.as_str()), Some("a10g"));

        // The same type with other architectures.
        let with_archs = |archs: &[ArchitectureType]| {
            let mut processor = ProcessorInfo::builder();
            for a in archs {
                processor = processor.supported_architectures(a.clone());
            }
            let mut other = info.clone();
            other.processor_info = Some(processor.build());
            other
        };
        let mac = with_archs(&[ArchitectureType::Arm64Mac]);
        assert_eq!(TypeInfo::from_sdk(&mac), None);
        // Regression: older types (t2, m1, c3) list i386 before x86_64 and
        // were left out.
        let t2 = with_archs(&[ArchitectureType::I386, ArchitectureType::X8664]);
        assert_eq!(
            TypeInfo::from_sdk(&t2).map(|t| t.arch),
            Some("amd64".to_string())
        );
    }
}
