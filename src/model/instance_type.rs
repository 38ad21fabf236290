//! Instance types and their offerings.
//!
//! An instance type's allocatable resources depend on the kubelet settings of
//! the NodePool's EC2NodeClass (max pods, pods per core, reserved resources,
//! root volume), so the scheduling core receives instance types per NodePool;
//! [`InstanceType::for_node_class`] derives them from a catalog entry.

use super::labels::{ARCH, CAPACITY_TYPE, INSTANCE_TYPE, OS, ZONE};
use super::quantity::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
use super::requirements::{Requirement, Requirements};
use super::resources::Resources;

/// The label with a type's vCPUs.
const LABEL_VCPUS: &str = "karpenter.k8s.aws/instance-cpu";
/// The label with a type's memory in MiB.
const LABEL_MEMORY_MIB: &str = "karpenter.k8s.aws/instance-memory";

/// One way to buy an instance type: a zone and a capacity type at a price.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    pub zone: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// USD per hour.
    pub price: f64,
    pub available: bool,
    /// For a `reserved` offering, the capacity reservations it launches
    /// into; empty for the others.
    pub reservations: Vec<Reservation>,
}

/// A capacity reservation behind a `reserved` offering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub id: String,
    /// The labels a node launched into it gets
    /// ([`super::labels::RESERVATION_KEYS`]).
    pub labels: std::collections::BTreeMap<String, String>,
    /// Instances left in it: at most this many NodeClaims of one solve
    /// are planned into it.
    pub left: u32,
}

/// Resources the node keeps for itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overhead {
    pub kube_reserved: Resources,
    pub system_reserved: Resources,
    pub eviction_threshold: Resources,
}

impl Overhead {
    pub fn total(&self) -> Resources {
        let mut t = self.kube_reserved.clone();
        t.add(&self.system_reserved);
        t.add(&self.eviction_threshold);
        t
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    pub name: String,
    /// The labels a node of this type carries, as requirements (zones and
    /// capacity types included).
    pub requirements: Requirements,
    pub capacity: Resources,
    pub overhead: Overhead,
    /// Capacity minus overhead: what pods may request.
    pub allocatable: Resources,
    pub offerings: Vec<Offering>,
}

/// Kubelet settings of an EC2NodeClass that change allocatable resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletSettings {
    pub max_pods: Option<i64>,
    pub pods_per_core: Option<i64>,
    pub kube_reserved: Option<Resources>,
    pub system_reserved: Option<Resources>,
    /// Hard eviction thresholds given as absolute quantities.
    pub eviction_hard: Option<Resources>,
    /// Root volume size in bytes, from the block device mappings.
    pub root_volume_bytes: Option<i64>,
}

impl InstanceType {
    /// The cheapest available offering allowed by `ok`.
    pub fn cheapest_offering(&self, ok: impl Fn(&Offering) -> bool) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|o| o.available && ok(o))
            .min_by(|a, b| a.price.total_cmp(&b.price))
    }

    /// Fills in requirements implied by the name and offerings when a catalog
    /// entry leaves them out.
    pub fn complete_requirements(&mut self) {
        if self.requirements.get(INSTANCE_TYPE).is_none() {
            self.requirements
                .add(INSTANCE_TYPE, Requirement::in_values([self.name.clone()]));
        }
        if self.requirements.get(ZONE).is_none() {
            let zones: Vec<String> = self.offerings.iter().map(|o| o.zone.clone()).collect();
            self.requirements.add(ZONE, Requirement::in_values(zones));
        }
        if self.requirements.get(CAPACITY_TYPE).is_none() {
            let cts: Vec<String> = self
                .offerings
                .iter()
                .map(|o| o.capacity_type.clone())
                .collect();
            self.requirements
                .add(CAPACITY_TYPE, Requirement::in_values(cts));
        }
        for (key, default) in [(ARCH, "amd64"), (OS, "linux")] {
            if self.requirements.get(key).is_none() {
                self.requirements
                    .add(key, Requirement::in_values([default]));
            }
        }
    }

    /// The instance type as a NodePool whose EC2NodeClass has `kubelet`
    /// settings would see it.
    pub fn for_node_class(&self, kubelet: &KubeletSettings) -> InstanceType {
        if *kubelet == KubeletSettings::default() {
            return self.clone();
        }
        let mut it = self.clone();
        if let Some(r) = &kubelet.kube_reserved {
            it.overhead.kube_reserved = r.clone();
        }
        if let Some(r) = &kubelet.system_reserved {
            it.overhead.system_reserved = r.clone();
        }
        if let Some(r) = &kubelet.eviction_hard {
            it.overhead.eviction_threshold = r.clone();
        }
        if let Some(bytes) = kubelet.root_volume_bytes {
            it.capacity.set(EPHEMERAL_STORAGE, bytes);
        }
        let mut pods = it.capacity.get(PODS);
        if let Some(m) = kubelet.max_pods {
            pods = m;
        }
        if let Some(ppc) = kubelet.pods_per_core {
            let cores = it.capacity.get(CPU) / 1000;
            if ppc > 0 {
                pods = pods.min(ppc.saturating_mul(cores.max(1)));
            }
        }
        it.capacity.set(PODS, pods);
        let mut alloc = it.capacity.clone();
        alloc.sub(&it.overhead.total());
        for v in alloc.0.values_mut() {
            *v = (*v).max(0);
        }
        it.allocatable = alloc;
        it
    }

    /// Ensures capacity is known. When a catalog gives only allocatable,
    /// the cpu and memory capacity come from the type's
    /// `karpenter.k8s.aws/instance-cpu` (vCPUs) and `instance-memory` (MiB)
    /// labels where it has them, the difference to allocatable being the
    /// node's overhead; otherwise capacity is allocatable plus overhead.
    pub fn complete_capacity(&mut self) {
        if self.overhead == Overhead::default() {
            for (key, label, unit) in [
                (CPU, LABEL_VCPUS, 1000),
                (MEMORY, LABEL_MEMORY_MIB, 1 << 20),
            ] {
                let labelled = self
                    .requirements
                    .single_value(label)
                    .and_then(|v| v.parse::<i64>().ok())
                    .and_then(|v| v.checked_mul(unit));
                if let Some(cap) = labelled
                    && !self.capacity.0.contains_key(key)
                    && let Some(&alloc) = self.allocatable.0.get(key)
                    && cap >= alloc
                {
                    self.capacity.set(key, cap);
                    self.overhead
                        .kube_reserved
                        .set(key, cap.saturating_sub(alloc));
                }
            }
        }
        let total = self.overhead.total();
        for (k, v) in self.allocatable.0.clone() {
            if !self.capacity.0.contains_key(&k) {
                self.capacity.set(&k, v.saturating_add(total.get(&k)));
            }
        }
        for k in [CPU, MEMORY, PODS] {
            if !self.allocatable.0.contains_key(k) {
                let v = self.capacity.get(k).saturating_sub(total.get(k)).max(0);
                self.allocatable.set(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m5_large() -> InstanceType {
        let mut it = InstanceType {
            name: "m5.large".into(),
            requirements: Requirements::new(),
            capacity: Resources::parse([("cpu", "2"), ("memory", "8Gi"), ("pods", "29")]).unwrap(),
            overhead: Overhead {
                kube_reserved: Resources::parse([("cpu", "70m"), ("memory", "442Mi")]).unwrap(),
                ..Overhead::default()
            },
            allocatable: Resources::new(),
            offerings: vec![Offering {
                zone: "us-east-1a".into(),
                capacity_type: "on-demand".into(),
                price: 0.096,
                available: true,
                reservations: Vec::new(),
            }],
        };
        it.complete_capacity();
        it.complete_requirements();
        it
    }

    #[test]
    fn allocatable_is_capacity_minus_overhead() {
        let it = m5_large();
        assert_eq!(it.allocatable.get("cpu"), 1930);
        assert_eq!(it.allocatable.get("pods"), 29);
        assert_eq!(it.requirements.single_value(ZONE), Some("us-east-1a"));
    }

    #[test]
    fn capacity_comes_from_the_labels_when_a_catalog_gives_only_allocatable() {
        let mut it = InstanceType {
            name: "t3.large".into(),
            requirements: Requirements::from_labels(&std::collections::BTreeMap::from([
                (
                    "karpenter.k8s.aws/instance-cpu".to_string(),
                    "2".to_string(),
                ),
                (
                    "karpenter.k8s.aws/instance-memory".to_string(),
                    "8192".to_string(),
                ),
            ])),
            capacity: Resources::new(),
            overhead: Overhead::default(),
            allocatable: Resources::parse([("cpu", "1930m"), ("memory", "6837Mi"), ("pods", "35")])
                .unwrap(),
            offerings: Vec::new(),
        };
        it.complete_capacity();
        assert_eq!(it.capacity.get("cpu"), 2000);
        assert_eq!(it.capacity.get("memory"), 8192 << 20);
        assert_eq!(it.capacity.get("pods"), 35);
        assert_eq!(it.allocatable.get("cpu"), 1930);
        // Kubelet settings keep the overhead the catalog implied.
        let adjusted = it.for_node_class(&KubeletSettings {
            max_pods: Some(110),
            ..KubeletSettings::default()
        });
        assert_eq!(adjusted.allocatable.get("cpu"), 1930);
        assert_eq!(adjusted.allocatable.get("memory"), 6837 << 20);
        assert_eq!(adjusted.allocatable.get("pods"), 110);
    }

    #[test]
    fn kubelet_settings_change_allocatable() {
        let it = m5_large().for_node_class(&KubeletSettings {
            max_pods: Some(110),
            pods_per_core: Some(10),
            system_reserved: Some(Resources::parse([("cpu", "100m")]).unwrap()),
            ..KubeletSettings::default()
        });
        assert_eq!(it.allocatable.get("pods"), 20);
        assert_eq!(it.allocatable.get("cpu"), 1830);
    }
}
