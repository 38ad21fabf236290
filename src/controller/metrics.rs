//! The controller's metrics, in a registry the controller owns, with the
//! reference autoscaler's names where the meaning is the same (so existing
//! dashboards work) and `dovetail_` names for dovetail's own.

use prometheus::{CounterVec, Gauge, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

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
        let decisions = IntCounterVec::new(
            Opts::new(
                "karpenter_voluntary_disruption_decisions_total",
                "Disruption decisions carried out, by decision (delete, replace), reason and consolidation type.",
            ),
            &["decision", "reason", "consolidation_type"],
        )
        .expect("valid counter options");
        let allowed_disruptions = IntGaugeVec::new(
            Opts::new(
                "karpenter_nodepools_allowed_disruptions",
                "Nodes each NodePool's budgets allow to be disrupted now, by reason.",
            ),
            &["nodepool", "reason"],
        )
        .expect("valid gauge options");
        let nodeclaims_disrupted = IntCounterVec::new(
            Opts::new(
                "karpenter_nodeclaims_disrupted_total",
                "NodeClaims disrupted, by reason and NodePool.",
            ),
            &["reason", "nodepool"],
        )
        .expect("valid counter options");
        let nodes_drained = IntCounter::new(
            "karpenter_nodes_drained_total",
            "Nodes drained of their pods before termination.",
        )
        .expect("valid counter options");
        let pods_drained = IntCounter::new(
            "karpenter_pods_drained_total",
            "Pods evicted (or, past a terminationGracePeriod, deleted) to drain nodes.",
        )
        .expect("valid counter options");
        let savings = Gauge::new(
            "dovetail_consolidation_savings_dollars_per_hour",
            "How much lower the fleet's hourly price is for the consolidation decisions carried out since start (USD/h).",
        )
        .expect("valid gauge options");
        let trials = CounterVec::new(
            Opts::new(
                "dovetail_disruption_trials_total",
                "Removal trials run by disruption passes (placements of a candidate set's pods), by method.",
            ),
            &["method"],
        )
        .expect("valid counter options");
        for collector in [
            Box::new(decisions.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(allowed_disruptions.clone()),
            Box::new(nodeclaims_disrupted.clone()),
            Box::new(nodes_drained.clone()),
            Box::new(pods_drained.clone()),
            Box::new(savings.clone()),
            Box::new(trials.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        Metrics {
            registry,
            decisions,
            allowed_disruptions,
            nodeclaims_disrupted,
            nodes_drained,
            pods_drained,
            savings,
            trials,
        }
    }

    /// The registry, for a `/metrics` endpoint.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}
