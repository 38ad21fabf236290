//! The controller's metrics, in a registry the controller owns, with the
//! reference autoscaler's names where the meaning is the same (so existing
//! dashboards work) and `dovetail_` names for dovetail's own.

use std::time::Instant;

use prometheus::{
    CounterVec, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGaugeVec, Opts, Registry,
};

use crate::api::{EC2NodeClass, NodeClaim, NodePool};
use crate::cloud::{
    CloudError, CloudProvider, Instance, Launched, NodeClassResolution, OfferingKey,
};
use crate::drift::DriftReason;
use crate::metrics::register;
use crate::model::InstanceType;

/// Buckets of the reference's duration histograms (seconds).
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The metrics of one controller.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// `karpenter_voluntary_disruption_decisions_total{decision,reason,consolidation_type}`
    pub decisions: IntCounterVec,
    /// `karpenter_nodepools_allowed_disruptions{nodepool,reason}`
    pub allowed_disruptions: IntGaugeVec,
    /// `karpenter_nodeclaims_disrupted_total{reason,nodepool}`
    pub nodeclaims_disrupted: IntCounterVec,
    /// `karpenter_nodes_drained_total`
    pub nodes_drained: IntCounter,
    /// `karpenter_pods_drained_total`
    pub pods_drained: IntCounter,
    /// `dovetail_consolidation_savings_dollars_per_hour`
    pub savings: Gauge,
    /// `dovetail_disruption_trials_total{method}`: removal trials run.
    pub trials: CounterVec,
    /// `karpenter_nodeclaims_created_total{reason,nodepool}`: `reason` is
    /// `provisioning` or `disruption`.
    pub nodeclaims_created: IntCounterVec,
    /// `karpenter_nodes_created_total{nodepool}`: nodes registered.
    pub nodes_created: IntCounterVec,
    /// `karpenter_scheduler_scheduling_duration_seconds`: one solve.
    pub scheduling_duration: Histogram,
    /// `karpenter_cloudprovider_duration_seconds{controller,method,provider}`
    /// (see [`Metered`]).
    pub cloudprovider_duration: HistogramVec,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// The metrics, registered in a new registry.
    pub fn new() -> Self {
        let registry = Registry::new();
        let decisions = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "karpenter_voluntary_disruption_decisions_total",
                    "Disruption decisions carried out, by decision (delete, replace), reason and consolidation type.",
                ),
                &["decision", "reason", "consolidation_type"],
            ),
        );
        let allowed_disruptions = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "karpenter_nodepools_allowed_disruptions",
                    "Nodes each NodePool's budgets allow to be disrupted now, by reason.",
                ),
                &["nodepool", "reason"],
            ),
        );
        let nodeclaims_disrupted = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "karpenter_nodeclaims_disrupted_total",
                    "NodeClaims disrupted, by reason and NodePool.",
                ),
                &["reason", "nodepool"],
            ),
        );
        let nodes_drained = register(
            &registry,
            IntCounter::new(
                "karpenter_nodes_drained_total",
                "Nodes drained of their pods before termination.",
            ),
        );
        let pods_drained = register(
            &registry,
            IntCounter::new(
                "karpenter_pods_drained_total",
                "Pods evicted (or, past a terminationGracePeriod, deleted) to drain nodes.",
            ),
        );
        let savings = register(
            &registry,
            Gauge::new(
                "dovetail_consolidation_savings_dollars_per_hour",
                "How much lower the fleet's hourly price is for the consolidation decisions carried out since start (USD/h).",
            ),
        );
        let trials = register(
            &registry,
            CounterVec::new(
                Opts::new(
                    "dovetail_disruption_trials_total",
                    "Removal trials run by disruption passes (placements of a candidate set's pods), by method.",
                ),
                &["method"],
            ),
        );
        let nodeclaims_created = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "karpenter_nodeclaims_created_total",
                    "NodeClaims created, by reason (provisioning, disruption) and NodePool.",
                ),
                &["reason", "nodepool"],
            ),
        );
        let nodes_created = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "karpenter_nodes_created_total",
                    "Nodes registered for a NodeClaim, by NodePool.",
                ),
                &["nodepool"],
            ),
        );
        let scheduling_duration = register(
            &registry,
            Histogram::with_opts(
                HistogramOpts::new(
                    "karpenter_scheduler_scheduling_duration_seconds",
                    "Duration of one scheduling solve for pending pods.",
                )
                .buckets(DURATION_BUCKETS.to_vec()),
            ),
        );
        let cloudprovider_duration = register(
            &registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "karpenter_cloudprovider_duration_seconds",
                    "Duration of cloud provider calls, by method.",
                )
                .buckets(DURATION_BUCKETS.to_vec()),
                &["controller", "method", "provider"],
            ),
        );
        Metrics {
            registry,
            decisions,
            allowed_disruptions,
            nodeclaims_disrupted,
            nodes_drained,
            pods_drained,
            savings,
            trials,
            nodeclaims_created,
            nodes_created,
            scheduling_duration,
            cloudprovider_duration,
        }
    }

    /// The registry, for a `/metrics` endpoint.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

/// A [`CloudProvider`] whose calls are timed into
/// `karpenter_cloudprovider_duration_seconds`, labelled with the provider's
/// name and the method.
pub struct Metered<P> {
    inner: P,
    provider: &'static str,
    durations: HistogramVec,
}

impl<P> Metered<P> {
    pub fn new(inner: P, provider: &'static str, metrics: &Metrics) -> Self {
        Metered {
            inner,
            provider,
            durations: metrics.cloudprovider_duration.clone(),
        }
    }

    pub fn inner(&self) -> &P {
        &self.inner
    }

    async fn timed<T>(&self, method: &str, call: impl Future<Output = T>) -> T {
        let start = Instant::now();
        let out = call.await;
        self.durations
            .with_label_values(&["nodeclaim", method, self.provider])
            .observe(start.elapsed().as_secs_f64());
        out
    }
}

impl<P: CloudProvider> CloudProvider for Metered<P> {
    async fn create(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
        unavailable: &std::collections::BTreeSet<OfferingKey>,
    ) -> Result<Launched, CloudError> {
        self.timed("Create", self.inner.create(claim, nodeclass, unavailable))
            .await
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        self.timed("Delete", self.inner.delete(provider_id)).await
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        self.timed("Get", self.inner.get(provider_id)).await
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.timed("List", self.inner.list()).await
    }

    async fn instance_types(
        &self,
        nodepool: &NodePool,
        nodeclass: &EC2NodeClass,
    ) -> Result<Vec<InstanceType>, CloudError> {
        self.timed(
            "GetInstanceTypes",
            self.inner.instance_types(nodepool, nodeclass),
        )
        .await
    }

    async fn resolve_node_class(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<NodeClassResolution, CloudError> {
        self.timed("ResolveNodeClass", self.inner.resolve_node_class(nodeclass))
            .await
    }

    async fn is_drifted(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
    ) -> Result<Vec<DriftReason>, CloudError> {
        self.timed("IsDrifted", self.inner.is_drifted(claim, nodeclass))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::{Clock, ManualClock, Timestamp};
    use crate::cloud::sim::{SimConfig, SimEc2};

    #[tokio::test]
    async fn metered_calls_are_timed_by_method_and_provider() {
        let metrics = Metrics::new();
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        let sim = SimEc2::new(SimConfig::new(SimEc2::builtin_catalog().unwrap()), clock);
        let cloud = Metered::new(sim, "sim", &metrics);
        assert!(cloud.list().await.unwrap().is_empty());
        assert!(cloud.delete("aws:///us-east-1a/i-gone").await.is_err());
        let count = |method: &str| {
            metrics
                .cloudprovider_duration
                .with_label_values(&["nodeclaim", method, "sim"])
                .get_sample_count()
        };
        assert_eq!((count("List"), count("Delete"), count("Get")), (1, 1, 0));
    }
}
