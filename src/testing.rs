//! What the unit tests share, in one place: objects from YAML, the pending
//! pod most provisioning tests start from, the world a controller test runs
//! in (a virtual clock, the in-memory API server and the simulated EC2), and
//! the harness of a controller test ([`Env`]: that world, a controller on it
//! and a single-threaded runtime). A test module keeps only what is its own:
//! its fixtures, and its passes as a local trait on [`Env`].
//!
//! Placement: a file's unit tests sit in a `#[cfg(test)] mod tests` at its
//! end, or, when they outgrow it, in a `tests.rs` (or `tests/`) beside it,
//! declared the same way; `tests/layers.rs` relies on both.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
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
    from_yaml(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n\
         spec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: '1', memory: 1Gi}}}}}}]}}\n\
         status: {{phase: Pending, conditions: [{{type: PodScheduled, status: 'False', reason: Unschedulable}}]}}\n"
    ))
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
