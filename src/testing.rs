//! What the unit tests share, in one place: objects from YAML, pods and
//! nodes built up field by field ([`pod`], [`node`]), the pending pod most
//! provisioning tests start from, the world a controller test runs
//! in (a virtual clock, the in-memory API server and the simulated EC2), and
//! the harness of a controller test ([`Env`]: that world, a controller on it
//! and a single-threaded runtime). A test module keeps only what is its own:
//! its fixtures, and its passes as a local trait on [`Env`].
//!
//! Placement: a file's unit tests sit in a `#[cfg(test)] mod tests` at its
//! end, or, when they outgrow it, in a `tests.rs` (or `tests/`) beside it,
//! declared the same way; `tests/layers.rs` relies on both.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeCondition, NodeSpec, Pod, PodCondition, PodSpec, PodStatus,
    ResourceRequirements, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::de::DeserializeOwned;

use crate::clock::{Clock, ManualClock, Timestamp};
use crate::controller::{Controller, Settings};
use crate::world::MemoryCluster;
use crate::world::ec2::{SimConfig, SimEc2};

/// An object from YAML, read as the API server reads JSON.
pub(crate) fn from_yaml<K: DeserializeOwned>(text: &str) -> K {
    let value: serde_json::Value = serde_saphyr::from_str(text).unwrap();
    serde_json::from_value(value).unwrap()
}

/// An object from JSON, as the API server reads it.
pub(crate) fn from_json<K: DeserializeOwned>(value: serde_json::Value) -> K {
    serde_json::from_value(value).expect("a valid object")
}

/// The NodePool `general`, consolidating at once, with these disruption
/// budgets.
pub(crate) fn pool_with_budgets(budgets: serde_json::Value) -> crate::api::NodePool {
    let mut pool = crate::api::NodePool::test("general");
    pool.spec.disruption = Some(from_json(
        serde_json::json!({"consolidateAfter": "0s", "budgets": budgets}),
    ));
    pool
}

/// The examples repository's EC2NodeClass `default`, as committed.
pub(crate) fn example_class() -> crate::api::EC2NodeClass {
    from_yaml(include_str!("../examples-repo/nodeclasses/default.yaml"))
}

/// The examples repository's NodePool `general`, as committed.
pub(crate) fn example_pool() -> crate::api::NodePool {
    from_yaml(include_str!("../examples-repo/nodepools/general.yaml"))
}

/// A pod of one CPU and 1 GiB that kube-scheduler found no node for.
pub(crate) fn pending_pod(name: &str) -> Pod {
    pod("default", name)
        .requests("1", "1Gi")
        .unschedulable()
        .build()
}

/// A pod in `namespace` with one container `c` (image `i`) and nothing
/// else; the methods of [`TestPod`] add what a test needs.
pub(crate) fn pod(namespace: &str, name: &str) -> TestPod {
    TestPod(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some("i".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    })
}

/// A test's pod, built up from [`pod`].
pub(crate) struct TestPod(Pod);

impl TestPod {
    /// With the label `key: value`.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        let labels = self.0.metadata.labels.get_or_insert_default();
        labels.insert(key.into(), value.into());
        self
    }

    /// With the annotation `key: value`.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        let annotations = self.0.metadata.annotations.get_or_insert_default();
        annotations.insert(key.into(), value.into());
        self
    }

    /// Controlled by the `kind` named `name` (uid `<name>-uid`): a Job of
    /// batch/v1, a ReplicationController or Node of v1, else a kind of
    /// apps/v1.
    pub fn owned_by(mut self, kind: &str, name: &str) -> Self {
        let api_version = match kind {
            "Job" => "batch/v1",
            "ReplicationController" | "Node" => "v1",
            _ => "apps/v1",
        };
        let owners = self.0.metadata.owner_references.get_or_insert_default();
        owners.push(OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("{name}-uid"),
            controller: Some(true),
            ..OwnerReference::default()
        });
        self
    }

    /// Bound to the node `node`.
    pub fn on(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.into());
        self
    }

    /// With a termination grace period of its own.
    pub fn grace(mut self, seconds: i64) -> Self {
        self.spec().termination_grace_period_seconds = Some(seconds);
        self
    }

    /// In the priority class `class`.
    pub fn priority_class(mut self, class: &str) -> Self {
        self.spec().priority_class_name = Some(class.into());
        self
    }

    /// Its container requesting `cpu` and `memory`.
    pub fn requests(mut self, cpu: &str, memory: &str) -> Self {
        let requests = [("cpu", cpu), ("memory", memory)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.into())))
            .collect();
        self.spec().containers[0].resources = Some(ResourceRequirements {
            requests: Some(requests),
            ..ResourceRequirements::default()
        });
        self
    }

    /// In `phase`, its Ready condition `ready`.
    pub fn phase(mut self, phase: &str, ready: bool) -> Self {
        let status = if ready { "True" } else { "False" };
        self.0.status = Some(PodStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: status.into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        self
    }

    /// Running and Ready.
    pub fn running(self) -> Self {
        self.phase("Running", true)
    }

    /// Pending: kube-scheduler found no node for it.
    pub fn unschedulable(mut self) -> Self {
        self.0.status = Some(PodStatus {
            phase: Some("Pending".into()),
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        self
    }

    pub fn build(self) -> Pod {
        self.0
    }

    fn spec(&mut self) -> &mut PodSpec {
        self.0.spec.get_or_insert_default()
    }
}

/// A node named `name` with no status; [`TestNode`]'s methods add to it.
pub(crate) fn node(name: &str) -> TestNode {
    TestNode(Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec::default()),
        status: None,
    })
}

/// A test's node, built up from [`node`].
pub(crate) struct TestNode(Node);

impl TestNode {
    /// With the label `key: value`.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        let labels = self.0.metadata.labels.get_or_insert_default();
        labels.insert(key.into(), value.into());
        self
    }

    /// With the taint `key` and `effect` (no value).
    pub fn taint(mut self, key: &str, effect: &str) -> Self {
        let spec = self.0.spec.get_or_insert_default();
        spec.taints.get_or_insert_default().push(Taint {
            key: key.into(),
            effect: effect.into(),
            ..Taint::default()
        });
        self
    }

    /// With the condition `type_` at `status`, as its kubelet reports.
    pub fn condition(mut self, type_: &str, status: &str) -> Self {
        let node_status = self.0.status.get_or_insert_default();
        node_status
            .conditions
            .get_or_insert_default()
            .push(NodeCondition {
                type_: type_.into(),
                status: status.into(),
                ..NodeCondition::default()
            });
        self
    }

    /// Ready, as its kubelet reports.
    pub fn ready(self) -> Self {
        self.condition("Ready", "True")
    }

    pub fn build(self) -> Node {
        self.0
    }
}

/// A runtime for a synchronous test to run the controller's passes on.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A controller test's world: a virtual clock at the Unix epoch, and the
/// in-memory API server and the simulated EC2 (the built-in catalog) on
/// it.
pub(crate) struct World {
    pub clock: Arc<ManualClock>,
    pub cluster: Arc<MemoryCluster>,
    pub cloud: Arc<SimEc2>,
}

impl World {
    pub fn new() -> World {
        let clock = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let catalog = SimEc2::builtin_catalog().unwrap();
        World {
            cluster: Arc::new(MemoryCluster::new(dyn_clock.clone())),
            cloud: Arc::new(SimEc2::new(SimConfig::new(catalog), dyn_clock)),
            clock,
        }
    }

    /// The clock as the controller takes it.
    pub fn dyn_clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// Creates the examples repository's EC2NodeClass and NodePool.
    pub fn create_examples(&self) {
        self.cluster.create(example_class()).unwrap();
        self.cluster.create(example_pool()).unwrap();
    }

    /// A controller with `settings` on this world.
    pub fn controller(&self, settings: Settings) -> Controller<MemoryCluster, SimEc2> {
        Controller::new(
            self.cluster.clone(),
            self.cloud.clone(),
            self.dyn_clock(),
            settings,
        )
    }

    /// The harness of a controller test: this world, a controller with
    /// `settings` on it, and a runtime to run its passes on.
    pub fn env(self, settings: Settings) -> Env {
        let controller = self.controller(settings);
        let World {
            clock,
            cluster,
            cloud,
        } = self;
        Env {
            clock,
            cluster,
            cloud,
            controller,
            rt: runtime(),
        }
    }
}

/// A controller test's harness (see [`World::env`]). A pass is run as
/// `e.rt.block_on(e.controller.reconcile_...())`; a module whose tests run
/// the same pass often names it in a trait of its own on `Env`.
pub(crate) struct Env {
    pub clock: Arc<ManualClock>,
    pub cluster: Arc<MemoryCluster>,
    pub cloud: Arc<SimEc2>,
    pub controller: Controller<MemoryCluster, SimEc2>,
    pub rt: tokio::runtime::Runtime,
}

impl Env {
    /// Moves the virtual clock on by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        self.clock.advance(by).expect("the clock moves forward");
    }

    /// The object `key` as the API server holds it now.
    pub fn get<K: crate::cluster::Object>(&self, key: &crate::cluster::ObjectKey) -> Arc<K> {
        crate::cluster::Cluster::get::<K>(self.cluster.as_ref(), key).expect("the object exists")
    }
}
