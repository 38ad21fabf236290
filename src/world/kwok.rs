//! The KWOK cloud provider (`dovetail controller --cloud kwok`): dovetail
//! on any cluster without AWS, as Karpenter's KWOK provider offers. The
//! capacity is the simulated EC2 of [`super::ec2`] (a catalog's types,
//! zones and prices, spot offerings, scripted insufficient capacity and
//! launch errors, EC2NodeClass resolution against a default VPC), and
//! each instance becomes a Node that [KWOK](https://kwok.sigs.k8s.io)
//! keeps alive:
//! - a launched instance registers its Node after the registration delay:
//!   named after the instance, `spec.providerID` `kwok://<id>`, the
//!   instance type's labels and the NodeClaim's, the NodeClaim's taints
//!   and startup taints with `karpenter.sh/unregistered`, the NodeClaim's
//!   capacity and allocatable, and the annotation `kwok.x-k8s.io/node:
//!   fake` that KWOK's `--manage-nodes-with-annotation-selector` selects;
//! - an instance terminated (by the controller, or reclaimed after a spot
//!   interruption) has its Node deleted, as the cloud node lifecycle
//!   controller deletes Nodes whose instance is gone;
//! - `kubectl annotate node N kwok.dovetail.dev/interrupt=KIND` scripts
//!   an interruption of the node's instance (`spot-interruption`,
//!   `rebalance`, `scheduled-change`, `state-change` or
//!   `state-change:STATE`): the event EC2 would send reaches the
//!   controller's interruption handling, and a spot instance is reclaimed
//!   two minutes later.
//!
//! The Nodes are the instances' durable record: each carries its
//! instance's launch (type, zone, capacity type, price, image, subnet,
//! security groups) in the annotation `kwok.dovetail.dev/instance`, and a
//! replica that starts or becomes leader adopts every Node it does not
//! know. A launch whose Node was not yet registered when its replica
//! stopped is lost, as with Karpenter's KWOK provider: its NodeClaim's
//! instance is gone, and the NodeClaim is replaced.
//!
//! It depends on `world::ec2` for the capacity, `cluster` for the Nodes and
//! `interruption` for the scripted events.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint as K8sTaint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::ec2::{self, ProviderIds, SimEc2};
use crate::api::{EC2NodeClass, NodeClaim, NodePool};
use crate::clock::{Clock, Timestamp, format_rfc3339, parse_rfc3339};
use crate::cloud::OfferingKey;
use crate::cloud::{
    CloudError, CloudProvider, Instance, InstanceState, Launched, NodeClassResolution,
};
use crate::cluster::{ApiError, Cluster, ObjectKey};
use crate::drift::DriftReason;
use crate::interruption::{InstanceState as Ec2State, Kind};
use crate::model::InstanceType;

/// The annotation KWOK's controller selects the Nodes it keeps alive by.
pub const KWOK_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Its value on dovetail's Nodes (KWOK's `--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake`).
pub const KWOK_MANAGED: &str = "fake";
/// The launch of a Node's instance, as JSON: what a replica that did not
/// launch it needs to know it.
pub const INSTANCE_ANNOTATION: &str = "kwok.dovetail.dev/instance";
/// Scripts an interruption of the Node's instance: a [`Kind`], and for a
/// state change optionally `:` and the state it enters.
pub const INTERRUPT_ANNOTATION: &str = "kwok.dovetail.dev/interrupt";

/// The default delay from launch to the Node's registration.
pub const DEFAULT_REGISTRATION_DELAY: Duration = Duration::from_secs(5);

/// How often the Nodes are reconciled with the instances.
const TICK: Duration = Duration::from_secs(1);

/// An instance's launch, as its Node's [`INSTANCE_ANNOTATION`] holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    instance_type: String,
    zone: String,
    capacity_type: String,
    price: f64,
    launched_at: String,
    nodeclaim: String,
    nodepool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    subnet_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    security_group_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    efa_attached: bool,
}

impl Record {
    fn of(instance: &Instance) -> Self {
        Record {
            instance_type: instance.instance_type.clone(),
            zone: instance.zone.clone(),
            capacity_type: instance.capacity_type.clone(),
            price: instance.price,
            launched_at: format_rfc3339(instance.launched_at),
            nodeclaim: instance.nodeclaim.clone(),
            nodepool: instance.nodepool.clone(),
            image_id: instance.image_id.clone(),
            subnet_id: instance.subnet_id.clone(),
            security_group_ids: instance.security_group_ids.clone(),
            efa_attached: instance.efa_attached,
        }
    }

    /// The instance a Node records, with the Node's well-known labels as
    /// the instance's; `None` for a Node that is not one of this
    /// provider's (no `kwok://` provider id, or no readable record).
    fn instance(node: &Node) -> Option<Instance> {
        let provider_id = node.spec.as_ref()?.provider_id.clone()?;
        let id = ProviderIds::Kwok.parse(&provider_id)?.to_string();
        let record: Record = serde_json::from_str(
            node.metadata
                .annotations
                .as_ref()?
                .get(INSTANCE_ANNOTATION)?,
        )
        .ok()?;
        let labels: BTreeMap<String, String> = node
            .metadata
            .labels
            .iter()
            .flatten()
            .filter(|(k, _)| crate::model::labels::is_well_known(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Some(Instance {
            id,
            provider_id,
            instance_type: record.instance_type,
            zone: record.zone,
            capacity_type: record.capacity_type,
            price: record.price,
            launched_at: parse_rfc3339(&record.launched_at).ok()?,
            state: InstanceState::Running,
            nodeclaim: record.nodeclaim,
            launch_batch: Vec::new(),
            nodepool: record.nodepool,
            labels: Arc::new(labels),
            image_id: record.image_id,
            subnet_id: record.subnet_id,
            security_group_ids: record.security_group_ids,
            efa_attached: record.efa_attached,
        })
    }
}

/// The interruption a Node's [`INTERRUPT_ANNOTATION`] scripts.
fn scripted(value: &str) -> Result<(Kind, Option<Ec2State>), String> {
    let (kind, state) = match value.split_once(':') {
        Some((k, s)) => (k.trim(), Some(s.trim())),
        None => (value.trim(), None),
    };
    let kind = Kind::ALL
        .into_iter()
        .find(|k| k.as_str() == kind)
        .ok_or_else(|| {
            format!(
                "{INTERRUPT_ANNOTATION}: {kind:?} is not one of {}",
                Kind::ALL.map(Kind::as_str).join(", ")
            )
        })?;
    let state = match state {
        None => None,
        Some(_) if kind != Kind::StateChange => {
            return Err(format!(
                "{INTERRUPT_ANNOTATION}: only a state-change names a state"
            ));
        }
        Some(s) => Some(
            Ec2State::ALL
                .into_iter()
                .find(|st| st.to_string() == s)
                .ok_or_else(|| {
                    format!(
                        "{INTERRUPT_ANNOTATION}: state {s:?} is not one of {}",
                        Ec2State::ALL.map(|s| s.to_string()).join(", ")
                    )
                })?,
        ),
    };
    Ok((kind, state))
}

/// See the module documentation.
pub struct KwokProvider<C: Cluster> {
    sim: SimEc2,
    cluster: Arc<C>,
    clock: Arc<dyn Clock>,
    registration_delay: Duration,
    /// Every instance id the simulated EC2 has held in this process: a
    /// Node of one it no longer holds is deleted, a Node of any other is
    /// adopted.
    seen: Mutex<HashSet<String>>,
    /// The Node revision last adopted from.
    adopted_at: AtomicU64,
    /// Interruptions already sent, by Node uid and annotation value.
    interrupted: Mutex<HashSet<(String, String)>>,
    /// Where the events of scripted interruptions go (the controller's
    /// interruption handling).
    events: mpsc::UnboundedSender<String>,
}

impl<C: Cluster> std::fmt::Debug for KwokProvider<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KwokProvider")
            .field("sim", &self.sim)
            .field("registration_delay", &self.registration_delay)
            .finish_non_exhaustive()
    }
}

impl<C: Cluster> KwokProvider<C> {
    /// A provider launching from `config` (its provider ids, call log and
    /// first instance id are set here), writing Nodes to `cluster` (whose
    /// cache must be synced: the Nodes it holds are adopted now). The
    /// receiver gets the events of scripted interruptions.
    pub fn new(
        mut config: ec2::SimConfig,
        cluster: Arc<C>,
        clock: Arc<dyn Clock>,
        registration_delay: Duration,
    ) -> (Self, mpsc::UnboundedReceiver<String>) {
        config.provider_ids = ProviderIds::Kwok;
        config.call_log = false;
        // Past every id an earlier process handed out: milliseconds since
        // the epoch, with room for 4,096 launches per millisecond.
        let millis = clock
            .now()
            .duration_since(Timestamp::UNIX_EPOCH)
            .as_millis()
            .clamp(0, 1 << 50) as u64;
        config.first_instance_id = config.first_instance_id.max(millis << 12);
        let (tx, rx) = mpsc::unbounded_channel();
        let provider = KwokProvider {
            sim: SimEc2::new(config, clock.clone()),
            cluster,
            clock,
            registration_delay,
            seen: Mutex::new(HashSet::new()),
            adopted_at: AtomicU64::new(u64::MAX),
            interrupted: Mutex::new(HashSet::new()),
            events: tx,
        };
        provider.adopt();
        (provider, rx)
    }

    /// The simulated EC2 behind the Nodes.
    pub fn sim(&self) -> &SimEc2 {
        &self.sim
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This provider's Nodes, with their instance ids.
    fn nodes(&self) -> Vec<(String, Arc<Node>)> {
        Cluster::list::<Node>(self.cluster.as_ref())
            .into_iter()
            .filter_map(|n| {
                let id = ProviderIds::Kwok
                    .parse(n.spec.as_ref()?.provider_id.as_deref()?)?
                    .to_string();
                Some((id, n))
            })
            .collect()
    }

    /// Adopts the instances of Nodes this process never knew (launched by
    /// another replica, or before a restart). Cheap while no Node changed.
    fn adopt(&self) {
        let revision = self.cluster.revision::<Node>();
        if self.adopted_at.swap(revision, Ordering::AcqRel) == revision {
            return;
        }
        let mut seen = self.seen();
        for (id, node) in self.nodes() {
            if seen.contains(&id) || node.metadata.deletion_timestamp.is_some() {
                continue;
            }
            match Record::instance(&node) {
                Some(instance) => match self.sim.adopt(instance) {
                    Ok(()) => {
                        seen.insert(id);
                    }
                    Err(error) => {
                        tracing::warn!(node = ?node.metadata.name, %error, "cannot adopt the KWOK node's instance")
                    }
                },
                None => tracing::warn!(
                    node = ?node.metadata.name,
                    "a kwok:// node without a readable {INSTANCE_ANNOTATION} annotation; not adopted"
                ),
            }
        }
    }

    /// One reconciliation of the Nodes with the instances, as the leader
    /// runs it: Nodes registered for instances past the registration
    /// delay, Nodes of terminated instances deleted, scripted
    /// interruptions sent. Returns how many Nodes it created and deleted.
    pub async fn reconcile(&self) -> (usize, usize) {
        self.adopt();
        let now = self.clock.now();
        for (at, id) in self.sim.take_reclaimed() {
            tracing::info!(instance = %id, at = %format_rfc3339(at), "EC2 reclaimed the spot instance");
        }
        let alive = self.sim.instances_now();
        let nodes = self.nodes();
        let registered: HashSet<&str> = nodes.iter().map(|(id, _)| id.as_str()).collect();
        let mut created = 0;
        for instance in alive.iter() {
            let due = instance
                .launched_at
                .checked_add(self.registration_delay)
                .is_ok_and(|t| t <= now);
            if !due || registered.contains(instance.id.as_str()) {
                continue;
            }
            let claim = Cluster::get::<NodeClaim>(
                self.cluster.as_ref(),
                &ObjectKey::cluster(&instance.nodeclaim),
            );
            let node = self.node(instance, claim.as_deref());
            match self.cluster.create(node).await {
                Ok(_) => created += 1,
                Err(ApiError::AlreadyExists { .. }) => {}
                Err(error) => {
                    tracing::warn!(instance = %instance.id, %error, "cannot register the KWOK node");
                }
            }
        }
        let live: HashSet<&str> = alive.iter().map(|i| i.id.as_str()).collect();
        let gone: Vec<(String, Arc<Node>)> = {
            let seen = self.seen();
            nodes
                .into_iter()
                .filter(|(id, n)| {
                    seen.contains(id)
                        && !live.contains(id.as_str())
                        && n.metadata.deletion_timestamp.is_none()
                })
                .collect()
        };
        let mut deleted = 0;
        for (id, node) in &gone {
            let key = ObjectKey::cluster(node.metadata.name.clone().unwrap_or_default());
            match self.cluster.delete::<Node>(&key).await {
                Ok(_) | Err(ApiError::NotFound { .. }) => deleted += 1,
                Err(error) => {
                    tracing::warn!(instance = %id, %error, "cannot delete the node of a terminated KWOK instance");
                }
            }
        }
        self.interrupt_scripted();
        (created, deleted)
    }

    /// Sends the interruptions the Nodes' annotations script, once each.
    fn interrupt_scripted(&self) {
        for (id, node) in self.nodes() {
            let Some(value) = node
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(INTERRUPT_ANNOTATION))
            else {
                continue;
            };
            let key = (node.metadata.uid.clone().unwrap_or_default(), value.clone());
            let mut done = self
                .interrupted
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !done.insert(key) {
                continue;
            }
            let outcome = scripted(value).and_then(|(kind, state)| {
                self.sim
                    .interrupt(kind, std::slice::from_ref(&id), state)
                    .map_err(|e| e.to_string())
            });
            match outcome {
                Ok(bodies) => {
                    tracing::info!(instance = %id, interruption = %value, "scripted interruption sent");
                    for body in bodies {
                        let _ = self.events.send(body);
                    }
                }
                Err(error) => {
                    tracing::warn!(node = ?node.metadata.name, %error, "cannot script the interruption");
                }
            }
        }
    }

    /// Reconciles every second while `leading` says so, until `stop`.
    pub async fn run(&self, leading: impl Fn() -> bool, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        loop {
            if leading() {
                self.reconcile().await;
            }
            tokio::select! {
                () = &mut stop => return,
                () = tokio::time::sleep(TICK) => {}
            }
        }
    }

    /// The Node an instance registers, for its NodeClaim (when known).
    fn node(&self, instance: &Instance, claim: Option<&NodeClaim>) -> Node {
        let name = instance.id.clone();
        let mut labels: BTreeMap<String, String> = (*instance.labels).clone();
        if let Some(claim_labels) = claim.and_then(|c| c.metadata.labels.as_ref()) {
            for (k, v) in claim_labels {
                labels.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        let it = self
            .sim
            .catalog()
            .iter()
            .find(|t| t.name == instance.instance_type);
        for (key, default) in [
            (crate::api::labels::LABEL_ARCH, "amd64"),
            (crate::api::labels::LABEL_OS, "linux"),
        ] {
            if !labels.contains_key(key) {
                let value = it
                    .and_then(|t| t.requirements.single_value(key))
                    .unwrap_or(default);
                labels.insert(key.to_string(), value.to_string());
            }
        }
        labels.insert(crate::api::labels::LABEL_HOSTNAME.to_string(), name.clone());
        let mut taints = vec![K8sTaint {
            key: crate::api::labels::TAINT_UNREGISTERED.to_string(),
            effect: "NoExecute".to_string(),
            ..K8sTaint::default()
        }];
        if let Some(spec) = claim.map(|c| &c.spec) {
            for t in spec
                .taints
                .iter()
                .flatten()
                .chain(spec.startup_taints.iter().flatten())
            {
                let taint: K8sTaint = match serde_json::to_value(t).and_then(serde_json::from_value)
                {
                    Ok(t) => t,
                    Err(_) => continue,
                };
                if !taints
                    .iter()
                    .any(|x| x.key == taint.key && x.effect == taint.effect)
                {
                    taints.push(taint);
                }
            }
        }
        let status = claim.and_then(|c| c.status.as_ref());
        let from_type = |pick: fn(&InstanceType) -> &crate::model::Resources| {
            it.map(|t| pick(t).to_quantities()).unwrap_or_default()
        };
        let capacity = status
            .and_then(|s| s.capacity.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| from_type(|t| &t.capacity));
        let allocatable = status
            .and_then(|s| s.allocatable.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| from_type(|t| &t.allocatable));
        let record = serde_json::to_string(&Record::of(instance)).unwrap_or_default();
        Node {
            metadata: ObjectMeta {
                name: Some(name),
                labels: Some(labels),
                annotations: Some(BTreeMap::from([
                    (KWOK_ANNOTATION.to_string(), KWOK_MANAGED.to_string()),
                    (INSTANCE_ANNOTATION.to_string(), record),
                ])),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(instance.provider_id.clone()),
                taints: Some(taints),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(capacity),
                allocatable: Some(allocatable),
                phase: Some("Pending".to_string()),
                ..NodeStatus::default()
            }),
        }
    }
}

impl<C: Cluster> CloudProvider for KwokProvider<C> {
    fn create(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
        unavailable: &BTreeSet<OfferingKey>,
    ) -> impl Future<Output = Result<Launched, CloudError>> + Send {
        self.adopt();
        let launch = self.sim.create(claim, nodeclass, unavailable);
        async move {
            let launched = launch.await?;
            self.seen().insert(launched.instance.id.clone());
            Ok(launched)
        }
    }

    fn delete(&self, provider_id: &str) -> impl Future<Output = Result<(), CloudError>> + Send {
        self.adopt();
        self.sim.delete(provider_id)
    }

    fn get(&self, provider_id: &str) -> impl Future<Output = Result<Instance, CloudError>> + Send {
        self.adopt();
        self.sim.get(provider_id)
    }

    fn list(&self) -> impl Future<Output = Result<Vec<Arc<Instance>>, CloudError>> + Send {
        self.adopt();
        self.sim.list()
    }

    fn instance_types(
        &self,
        nodepool: &NodePool,
        nodeclass: &EC2NodeClass,
    ) -> impl Future<Output = Result<Vec<InstanceType>, CloudError>> + Send {
        self.sim.instance_types(nodepool, nodeclass)
    }

    fn resolve_node_class(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> impl Future<Output = Result<NodeClassResolution, CloudError>> + Send {
        self.sim.resolve_node_class(nodeclass)
    }

    fn is_drifted(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
    ) -> impl Future<Output = Result<Vec<DriftReason>, CloudError>> + Send {
        self.adopt();
        self.sim.is_drifted(claim, nodeclass)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::world::MemoryCluster;

    struct World {
        clock: Arc<ManualClock>,
        cluster: Arc<MemoryCluster>,
    }

    impl World {
        fn new() -> World {
            let clock = Arc::new(ManualClock::new(
                parse_rfc3339("2026-01-05T00:00:00Z").expect("time"),
            ));
            let cluster = Arc::new(MemoryCluster::new(clock.clone()));
            World { clock, cluster }
        }

        fn provider(&self) -> (KwokProvider<MemoryCluster>, mpsc::UnboundedReceiver<String>) {
            let catalog = SimEc2::builtin_catalog().expect("catalog");
            KwokProvider::new(
                ec2::SimConfig::new(catalog),
                self.cluster.clone(),
                self.clock.clone(),
                Duration::from_secs(5),
            )
        }

        fn node(&self, name: &str) -> Option<Arc<Node>> {
            Cluster::get::<Node>(self.cluster.as_ref(), &ObjectKey::cluster(name))
        }
    }

    fn claim(name: &str, capacity_type: &str) -> NodeClaim {
        let mut c = NodeClaim::test(name);
        c.spec.requirements = vec![crate::api::NodeSelectorRequirementWithMinValues::new(
            crate::api::LABEL_CAPACITY_TYPE,
            crate::api::Operator::In,
            &[capacity_type],
        )];
        c.metadata.labels = Some(BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            ("team".to_string(), "checkout".to_string()),
        ]));
        c
    }

    /// A launch registers its Node only after the registration delay, as
    /// KWOK takes it: `kwok://` provider id, the type's and the claim's
    /// labels, the unregistered taint, capacity; terminating the instance
    /// deletes the Node.
    #[tokio::test]
    async fn a_launch_registers_its_node_after_the_delay_and_termination_deletes_it() {
        let w = World::new();
        let (kwok, _) = w.provider();
        let claim = claim("a", "on-demand");
        Cluster::create(w.cluster.as_ref(), claim.clone())
            .await
            .expect("claim");
        let launched = kwok
            .create(&claim, &EC2NodeClass::test("default"), &BTreeSet::new())
            .await
            .expect("launches")
            .instance;
        assert_eq!(launched.provider_id, format!("kwok://{}", launched.id));
        assert_eq!(kwok.reconcile().await, (0, 0), "not before the delay");
        w.clock.advance(Duration::from_secs(5)).expect("advance");
        assert_eq!(kwok.reconcile().await, (1, 0));
        let node = w.node(&launched.id).expect("registered");
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels["node.kubernetes.io/instance-type"],
            launched.instance_type
        );
        assert_eq!(labels["topology.kubernetes.io/zone"], launched.zone);
        assert_eq!(labels["team"], "checkout");
        assert_eq!(labels["kubernetes.io/hostname"], launched.id);
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations[KWOK_ANNOTATION], KWOK_MANAGED);
        let spec = node.spec.clone().unwrap_or_default();
        assert_eq!(
            spec.provider_id.as_deref(),
            Some(launched.provider_id.as_str())
        );
        assert!(
            spec.taints
                .iter()
                .flatten()
                .any(|t| t.key == "karpenter.sh/unregistered")
        );
        let status = node.status.clone().unwrap_or_default();
        assert!(status.allocatable.is_some_and(|a| a.contains_key("cpu")));
        assert_eq!(kwok.reconcile().await, (0, 0), "registered once");

        kwok.delete(&launched.provider_id)
            .await
            .expect("terminates");
        assert_eq!(kwok.reconcile().await, (0, 1));
        assert!(w.node(&launched.id).is_none());
    }

    /// A new process (a restart, a new leader) adopts the Nodes it finds:
    /// their instances answer `get` and `list` with their launch, its
    /// reconciliation deletes none of them, and its ids do not collide.
    #[tokio::test]
    async fn another_process_adopts_the_nodes_and_launches_past_their_ids() {
        let w = World::new();
        let (first, _) = w.provider();
        let claim_a = claim("a", "on-demand");
        let a = first
            .create(&claim_a, &EC2NodeClass::test("default"), &BTreeSet::new())
            .await
            .expect("launches")
            .instance;
        w.clock.advance(Duration::from_secs(5)).expect("advance");
        first.reconcile().await;
        drop(first);

        let (second, _) = w.provider();
        let got = second.get(&a.provider_id).await.expect("adopted");
        assert_eq!(
            (&got.instance_type, &got.zone, &got.capacity_type, got.price),
            (&a.instance_type, &a.zone, &a.capacity_type, a.price)
        );
        assert_eq!((&got.image_id, &got.subnet_id), (&a.image_id, &a.subnet_id));
        assert_eq!(got.nodeclaim, "a");
        assert_eq!(second.list().await.expect("list").len(), 1);
        assert_eq!(second.reconcile().await, (0, 0));
        let b = second
            .create(
                &claim("b", "on-demand"),
                &EC2NodeClass::test("default"),
                &BTreeSet::new(),
            )
            .await
            .expect("launches")
            .instance;
        assert_ne!(a.id, b.id);
    }

    /// The interrupt annotation sends EC2's event once, and a spot
    /// instance is reclaimed (its Node deleted) two minutes later; a value
    /// that names no interruption sends nothing.
    #[tokio::test]
    async fn an_annotated_spot_node_is_warned_once_then_reclaimed() {
        let w = World::new();
        let (kwok, mut events) = w.provider();
        let spot = kwok
            .create(
                &claim("a", "spot"),
                &EC2NodeClass::test("default"),
                &BTreeSet::new(),
            )
            .await
            .expect("launches")
            .instance;
        assert_eq!(spot.capacity_type, "spot");
        w.clock.advance(Duration::from_secs(5)).expect("advance");
        kwok.reconcile().await;
        let annotate = |value: &str| {
            let mut node = (*w.node(&spot.id).expect("node")).clone();
            node.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(INTERRUPT_ANNOTATION.to_string(), value.to_string());
            node
        };
        Cluster::replace(w.cluster.as_ref(), annotate("spot"))
            .await
            .expect("annotated");
        kwok.reconcile().await;
        assert!(events.try_recv().is_err(), "no such interruption kind");
        Cluster::replace(w.cluster.as_ref(), annotate("spot-interruption"))
            .await
            .expect("annotated");
        kwok.reconcile().await;
        kwok.reconcile().await;
        let body = events.try_recv().expect("the warning");
        assert!(
            body.contains("EC2 Spot Instance Interruption Warning"),
            "{body}"
        );
        assert!(body.contains(&spot.id), "{body}");
        assert!(events.try_recv().is_err(), "sent once");
        w.clock.advance(Duration::from_secs(120)).expect("advance");
        assert_eq!(kwok.reconcile().await, (0, 1), "reclaimed");
        assert!(w.node(&spot.id).is_none());
    }

    #[test]
    fn scripted_interruptions_parse_as_the_simulation_spells_them() {
        assert_eq!(scripted("rebalance"), Ok((Kind::Rebalance, None)));
        assert_eq!(
            scripted("state-change:stopping"),
            Ok((Kind::StateChange, Some(Ec2State::Stopping)))
        );
        assert!(scripted("rebalance:stopped").is_err());
        assert!(scripted("state-change:melted").is_err());
    }
}
