//! The cloud-provider interface: launching and terminating instances for
//! NodeClaims, and the instance types a NodePool may use. Two
//! implementations: the simulated EC2 and AWS.
//!
//! The controller depends only on [`CloudProvider`]; errors are typed so
//! the controller can react to each (insufficient capacity marks offerings
//! unavailable and retries elsewhere; not-found means the instance is gone).

pub mod sim;

use std::collections::BTreeMap;
use std::future::Future;

use crate::api::{EC2NodeClass, NodeClaim, NodePool};
use crate::clock::Timestamp;
use crate::model::InstanceType;

/// An offering: one instance type in one zone with one capacity type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OfferingKey {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
}

/// The lifecycle state of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
}

/// A launched instance as the provider reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// The EC2 instance id, e.g. `i-0123456789abcdef0`.
    pub id: String,
    /// `aws:///<zone>/<id>`, as the kubelet sets `spec.providerID`.
    pub provider_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// USD per hour of the offering it was launched on.
    pub price: f64,
    pub launched_at: Timestamp,
    pub state: InstanceState,
    /// The NodeClaim it was launched for (the `karpenter.sh/nodeclaim` tag).
    pub nodeclaim: String,
    /// The NodePool of that NodeClaim (the `karpenter.sh/nodepool` tag).
    pub nodepool: String,
    /// Well-known labels of the instance type, zone and capacity type, for
    /// the node that will register.
    pub labels: BTreeMap<String, String>,
}

/// Why a provider call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CloudError {
    /// No offering the NodeClaim allows could be launched. Lists the
    /// offerings that were tried and refused.
    #[error("insufficient capacity for {} offering(s)", offerings.len())]
    InsufficientCapacity { offerings: Vec<OfferingKey> },
    /// The instance does not exist (terminated and gone, or never existed).
    #[error("instance {0} not found")]
    NotFound(String),
    /// The NodeClaim's node class cannot be used yet or at all.
    #[error("node class {name} is not ready: {reason}")]
    NodeClassNotReady { name: String, reason: String },
    /// The NodeClaim cannot be launched as written (no instance type, bad
    /// requirements).
    #[error("invalid launch request: {0}")]
    InvalidRequest(String),
    /// Any other provider failure; retried with backoff.
    #[error("cloud provider error: {0}")]
    Api(String),
}

impl CloudError {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CloudError::InsufficientCapacity { .. } => "insufficient_capacity",
            CloudError::NotFound(_) => "not_found",
            CloudError::NodeClassNotReady { .. } => "nodeclass_not_ready",
            CloudError::InvalidRequest(_) => "invalid_request",
            CloudError::Api(_) => "api",
        }
    }
}

/// What the controller asks of a cloud.
pub trait CloudProvider: Send + Sync {
    /// Launches one instance for a NodeClaim: the cheapest available offering
    /// its requirements allow (instance types, zones, capacity types), with
    /// spot preferred where the NodeClaim allows it.
    fn create(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
    ) -> impl Future<Output = Result<Instance, CloudError>> + Send;

    /// Terminates an instance. Terminating an instance that is already gone
    /// is `NotFound`.
    fn delete(&self, provider_id: &str) -> impl Future<Output = Result<(), CloudError>> + Send;

    fn get(&self, provider_id: &str) -> impl Future<Output = Result<Instance, CloudError>> + Send;

    /// Every instance this provider launched that is not yet terminated.
    fn list(&self) -> impl Future<Output = Result<Vec<Instance>, CloudError>> + Send;

    /// The instance types a NodePool may launch through its node class, with
    /// allocatable resources as that node class configures the kubelet, and
    /// current offerings (availability and prices).
    fn instance_types(
        &self,
        nodepool: &NodePool,
        nodeclass: &EC2NodeClass,
    ) -> impl Future<Output = Result<Vec<InstanceType>, CloudError>> + Send;
}
