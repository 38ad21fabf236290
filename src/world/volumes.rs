//! The stand-in attach-detach controller of `dovetail simulate` (the part
//! of kube-controller-manager, with the CSI external attacher, that
//! attaches a pod's persistent volumes to its node).
//!
//! [`AttachDetach::sync`] runs once per simulation step against the
//! in-memory API server:
//! - a pod bound to an existing Node and not finished needs each of its
//!   PersistentVolumeClaims' (and generic ephemeral volumes' `<pod>-<volume>`
//!   claims') bound PersistentVolumes attached there, if the volume is
//!   attachable: a CSI volume (its driver attaches it) or an in-tree
//!   `awsElasticBlockStore` one (migrated to `ebs.csi.aws.com`);
//! - a needed attachment that has no `storage.k8s.io/v1` VolumeAttachment
//!   gets one `attach_delay` after it was first needed (`spec.attacher`,
//!   `spec.nodeName`, `spec.source.persistentVolumeName`, `status.attached:
//!   true`), named `csi-` and a hash of the three, as the real one is;
//! - a VolumeAttachment no pod needs any more (its pods deleted, evicted
//!   and stopped, or finished) is deleted `detach_delay` after that (the
//!   unmount and the EC2 DetachVolume call), unless it is needed again
//!   first.
//!
//! # Simplifications
//! - Pods start whether or not their volumes are attached yet.
//! - Whether a CSI driver attaches is not read from CSIDriver objects:
//!   every CSI volume attaches.
//! - Deletion is immediate: no `external-attacher` finalizer.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{
    VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec, VolumeAttachmentStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::clock::Timestamp;
use crate::cluster::{ObjectKey, Selector};
use crate::world::MemoryCluster;

/// How long after a pod needs a volume on its node its VolumeAttachment
/// appears, unless the scenario says (`cloud.volumeAttachDelay`): an EBS
/// attach takes a few seconds.
pub const DEFAULT_ATTACH_DELAY: Duration = Duration::from_secs(5);
/// How long after no pod needs it any more a VolumeAttachment is deleted,
/// unless the scenario says (`cloud.volumeDetachDelay`): the kubelet's
/// unmount, then the EBS detach.
pub const DEFAULT_DETACH_DELAY: Duration = Duration::from_secs(10);

/// The attacher of EBS volumes, and of in-tree ones through migration.
const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";

/// What one [`AttachDetach::sync`] did, for the simulation's timeline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VolumeReport {
    /// VolumeAttachments created, as (name, PersistentVolume, node).
    pub attached: Vec<(String, String, String)>,
    /// VolumeAttachments deleted, likewise.
    pub detached: Vec<(String, String, String)>,
    /// Writes that failed, as (object, message); the next sync retries.
    pub errors: Vec<(String, String)>,
}

impl VolumeReport {
    pub fn is_empty(&self) -> bool {
        self.attached.is_empty() && self.detached.is_empty() && self.errors.is_empty()
    }
}

/// An attachment: (PersistentVolume, node).
type Key = (String, String);

/// The stand-in attach-detach controller; see the module documentation.
#[derive(Debug, Clone)]
pub struct AttachDetach {
    attach_delay: Duration,
    detach_delay: Duration,
    /// Attachments needed and not made yet, with their attacher and since
    /// when they are needed.
    attaching: BTreeMap<Key, (String, Timestamp)>,
    /// Attachments no longer needed, since when.
    detaching: BTreeMap<Key, Timestamp>,
    /// The attachments the pods needed at the last sync, and the
    /// revisions of the kinds that answer was read from (pods, nodes,
    /// claims, volumes): a step that changed none of them reuses it
    /// instead of reading every pod again.
    needed: Option<([u64; 4], BTreeMap<Key, String>)>,
}

impl AttachDetach {
    pub fn new(attach_delay: Duration, detach_delay: Duration) -> Self {
        AttachDetach {
            attach_delay,
            detach_delay,
            attaching: BTreeMap::new(),
            detaching: BTreeMap::new(),
            needed: None,
        }
    }

    /// When the next attach or detach is due, as the last sync left them.
    pub fn next_due(&self) -> Option<Timestamp> {
        let attach = self
            .attaching
            .values()
            .filter_map(|(_, t)| t.checked_add(self.attach_delay).ok());
        let detach = self
            .detaching
            .values()
            .filter_map(|t| t.checked_add(self.detach_delay).ok());
        attach.chain(detach).min()
    }

    /// Brings the VolumeAttachments in line with the pods at `now`.
    pub fn sync(&mut self, cluster: &MemoryCluster, now: Timestamp) -> VolumeReport {
        let mut report = VolumeReport::default();
        let revisions = [
            cluster.kind_revision::<Pod>(),
            cluster.kind_revision::<Node>(),
            cluster.kind_revision::<PersistentVolumeClaim>(),
            cluster.kind_revision::<PersistentVolume>(),
        ];
        let needed = match self.needed.take() {
            Some((seen, needed)) if seen == revisions => needed,
            _ => needed(cluster),
        };
        let existing: BTreeMap<Key, String> = cluster
            .list::<VolumeAttachment>(None, &Selector::everything())
            .items
            .iter()
            .filter_map(|a| {
                let pv = a.spec.source.persistent_volume_name.clone()?;
                Some(((pv, a.spec.node_name.clone()), a.metadata.name.clone()?))
            })
            .collect();
        self.attaching
            .retain(|k, _| needed.contains_key(k) && !existing.contains_key(k));
        self.detaching
            .retain(|k, _| !needed.contains_key(k) && existing.contains_key(k));
        for (key, attacher) in &needed {
            if !existing.contains_key(key) {
                self.attaching
                    .entry(key.clone())
                    .or_insert_with(|| (attacher.clone(), now));
            }
        }
        for key in existing.keys() {
            if !needed.contains_key(key) {
                self.detaching.entry(key.clone()).or_insert(now);
            }
        }
        let due: Vec<(Key, String)> = self
            .attaching
            .iter()
            .filter(|(_, (_, since))| since.checked_add(self.attach_delay).is_ok_and(|t| t <= now))
            .map(|(k, (attacher, _))| (k.clone(), attacher.clone()))
            .collect();
        for ((pv, node), attacher) in due {
            let name = attachment_name(&pv, &attacher, &node);
            let va = VolumeAttachment {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                spec: VolumeAttachmentSpec {
                    attacher,
                    node_name: node.clone(),
                    source: VolumeAttachmentSource {
                        persistent_volume_name: Some(pv.clone()),
                        ..Default::default()
                    },
                },
                status: Some(VolumeAttachmentStatus {
                    attached: true,
                    ..Default::default()
                }),
            };
            match cluster.create(va) {
                Ok(_) => {
                    self.attaching.remove(&(pv.clone(), node.clone()));
                    report.attached.push((name, pv, node));
                }
                Err(e) => report
                    .errors
                    .push((format!("VolumeAttachment/{name}"), e.to_string())),
            }
        }
        let due: Vec<Key> = self
            .detaching
            .iter()
            .filter(|(_, since)| since.checked_add(self.detach_delay).is_ok_and(|t| t <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let Some(name) = existing.get(&key) else {
                continue;
            };
            match cluster.delete::<VolumeAttachment>(&ObjectKey::cluster(name.clone())) {
                Ok(_) => {
                    self.detaching.remove(&key);
                    report.detached.push((name.clone(), key.0, key.1));
                }
                Err(e) if e.is_not_found() => {
                    self.detaching.remove(&key);
                }
                Err(e) => report
                    .errors
                    .push((format!("VolumeAttachment/{name}"), e.to_string())),
            }
        }
        self.needed = Some((revisions, needed));
        report
    }
}

/// The attachments the pods need now, with their attachers.
fn needed(cluster: &MemoryCluster) -> BTreeMap<Key, String> {
    let mut out = BTreeMap::new();
    // Most clusters have few attachable volumes: without any, no pod needs
    // to be read.
    let attachable: BTreeMap<String, String> = cluster
        .list::<PersistentVolume>(None, &Selector::everything())
        .items
        .iter()
        .filter_map(|pv| Some((pv.metadata.name.clone()?, attacher(pv)?)))
        .collect();
    if attachable.is_empty() {
        return out;
    }
    let pods = cluster.list::<Pod>(None, &Selector::everything()).items;
    let nodes: BTreeSet<String> = cluster
        .list::<Node>(None, &Selector::everything())
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    for pod in &pods {
        let Some(spec) = pod.spec.as_ref() else {
            continue;
        };
        let Some(node) = spec.node_name.as_ref().filter(|n| nodes.contains(*n)) else {
            continue;
        };
        if crate::api::pod::is_finished(pod) {
            continue;
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        for v in spec.volumes.iter().flatten() {
            let claim = match (&v.persistent_volume_claim, &v.ephemeral) {
                (Some(c), _) => c.claim_name.clone(),
                (None, Some(_)) => format!("{pod_name}-{}", v.name),
                (None, None) => continue,
            };
            let Some(pv_name) = cluster
                .get_opt::<PersistentVolumeClaim>(&ObjectKey::new(namespace, claim))
                .and_then(|c| c.spec.as_ref()?.volume_name.clone())
            else {
                continue;
            };
            if let Some(attacher) = attachable.get(&pv_name) {
                out.insert((pv_name, node.clone()), attacher.clone());
            }
        }
    }
    out
}

/// Who attaches a PersistentVolume, if it is attached at all.
fn attacher(pv: &PersistentVolume) -> Option<String> {
    let spec = pv.spec.as_ref()?;
    if let Some(csi) = &spec.csi {
        return Some(csi.driver.clone());
    }
    spec.aws_elastic_block_store
        .as_ref()
        .map(|_| EBS_CSI_DRIVER.to_string())
}

/// `csi-` and a hash of the volume, attacher and node (the real name hashes
/// them with SHA-256; FNV-1a keeps it deterministic without another
/// dependency).
fn attachment_name(pv: &str, attacher: &str, node: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in pv.bytes().chain(attacher.bytes()).chain(node.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("csi-{h:016x}")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::cluster::DeleteParams;
    use crate::testing::from_yaml;

    fn at(s: u64) -> Timestamp {
        Timestamp::UNIX_EPOCH
            .checked_add(Duration::from_secs(s))
            .unwrap()
    }

    fn names(cluster: &MemoryCluster) -> Vec<(String, String)> {
        cluster
            .list::<VolumeAttachment>(None, &Selector::everything())
            .items
            .iter()
            .map(|a| {
                (
                    a.spec.source.persistent_volume_name.clone().unwrap(),
                    a.spec.node_name.clone(),
                )
            })
            .collect()
    }

    /// A pod with an EBS volume (and one with a local volume, never
    /// attached) on n1: attached after the attach delay; once the pod is
    /// deleted and gone, detached after the detach delay.
    #[test]
    fn a_pods_volume_is_attached_after_a_delay_and_detached_after_another() {
        let clock = Arc::new(ManualClock::new(at(0)));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let cluster = MemoryCluster::new(dyn_clock);
        cluster
            .create::<Node>(from_yaml(
                "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n",
            ))
            .unwrap();
        for (pv, source) in [
            (
                "pv-ebs",
                "csi: {driver: ebs.csi.aws.com, volumeHandle: vol-1}",
            ),
            ("pv-local", "local: {path: /mnt/disk}"),
        ] {
            cluster
                .create::<PersistentVolume>(from_yaml(&format!(
                    "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {pv}}}\nspec: {{capacity: {{storage: 1Gi}}, accessModes: [ReadWriteOnce], {source}}}\n"
                )))
                .unwrap();
        }
        for (claim, pv) in [("data", "pv-ebs"), ("scratch", "pv-local")] {
            cluster
                .create::<PersistentVolumeClaim>(from_yaml(&format!(
                    "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {claim}, namespace: default}}\nspec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}, volumeName: {pv}}}\n"
                )))
                .unwrap();
        }
        cluster
            .create::<Pod>(from_yaml(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: db, namespace: default}\nspec:\n  nodeName: n1\n  containers: [{name: c, image: x}]\n  volumes:\n  - {name: data, persistentVolumeClaim: {claimName: data}}\n  - {name: scratch, persistentVolumeClaim: {claimName: scratch}}\n",
            ))
            .unwrap();
        let mut ad = AttachDetach::new(Duration::from_secs(5), Duration::from_secs(10));
        assert!(ad.sync(&cluster, at(0)).is_empty());
        assert_eq!(ad.next_due(), Some(at(5)));
        assert!(ad.sync(&cluster, at(4)).is_empty());
        let r = ad.sync(&cluster, at(5));
        assert_eq!(r.attached.len(), 1, "{r:?}");
        assert_eq!(names(&cluster), [("pv-ebs".into(), "n1".into())]);
        assert_eq!(ad.next_due(), None);
        let va = cluster
            .get_opt::<VolumeAttachment>(&ObjectKey::cluster(r.attached[0].0.clone()))
            .unwrap();
        assert_eq!(va.spec.attacher, "ebs.csi.aws.com");
        assert!(va.status.as_ref().unwrap().attached);
        // The pod is deleted gracefully: its volume stays attached while
        // it stops, and is detached 10 s after it is gone.
        clock.set(at(20)).unwrap();
        cluster
            .delete_with::<Pod>(&ObjectKey::new("default", "db"), &DeleteParams::default())
            .unwrap();
        assert!(ad.sync(&cluster, at(20)).is_empty());
        assert_eq!(names(&cluster).len(), 1);
        cluster
            .delete_with::<Pod>(
                &ObjectKey::new("default", "db"),
                &DeleteParams::with_grace_period(0),
            )
            .unwrap();
        assert!(ad.sync(&cluster, at(50)).is_empty());
        assert_eq!(ad.next_due(), Some(at(60)));
        assert!(ad.sync(&cluster, at(59)).is_empty());
        let r = ad.sync(&cluster, at(60));
        assert_eq!(r.detached.len(), 1, "{r:?}");
        assert!(names(&cluster).is_empty());
        assert_eq!(ad.next_due(), None);
    }
}
