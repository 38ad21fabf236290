//! The controller's metrics, in a registry the controller owns, with the
//! reference autoscaler's names where the meaning is the same (so existing
//! dashboards work) and `dovetail_` names for dovetail's own.
//!
//! The reference's series: NodeClaim and node counters, disruption decisions
//! and eligible nodes, the termination and pod-startup summaries
//! (`crate::metrics::summary`),
//! `karpenter_scheduler_scheduling_duration_seconds`,
//! `karpenter_cloudprovider_duration_seconds` (through `Metered<P>`, a
//! `CloudProvider` wrapper that `dovetail controller` puts around its
//! provider), and controller-runtime's `controller_runtime_reconcile_*` with
//! one `controller` label per loop, timed by a guard each loop takes
//! (`Metrics::reconcile`), all with the reference's labels and label values.

use std::sync::Arc;
use std::time::Instant;

use prometheus::{
    CounterVec, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGaugeVec, Opts, Registry,
};

use crate::api::{EC2NodeClass, NodeClaim, NodePool};
use crate::clock::{Clock, SystemClock};
use crate::cloud::{
    CloudError, CloudProvider, Instance, Launched, NodeClassResolution, OfferingKey,
};
use crate::drift::DriftReason;
use crate::metrics::{SummaryVec, register};
use crate::model::InstanceType;

/// Buckets of the reference's duration histograms (seconds).
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// controller-runtime's buckets of `controller_runtime_reconcile_time_seconds`.
const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// The `controller` label of the reconcile metrics: one per loop, named as
/// the reference names the controller that does the same work.
pub mod controllers {
    /// Pending pods to new NodeClaims.
    pub const PROVISIONER: &str = "provisioner";
    /// Launch, registration, initialisation and liveness of NodeClaims.
    pub const LIFECYCLE: &str = "nodeclaim.lifecycle";
    /// Draining and releasing deleted NodeClaims and their nodes.
    pub const TERMINATION: &str = "node.termination";
    /// Instances without a NodeClaim, NodeClaims without an instance.
    pub const GARBAGE_COLLECTION: &str = "nodeclaim.garbagecollection";
    /// Expiration, drift, emptiness and consolidation.
    pub const DISRUPTION: &str = "disruption";
    /// One interruption message.
    pub const INTERRUPTION: &str = "interruption";
    /// Every loop.
    pub const ALL: [&str; 6] = [
        PROVISIONER,
        LIFECYCLE,
        TERMINATION,
        GARBAGE_COLLECTION,
        DISRUPTION,
        INTERRUPTION,
    ];
}

/// controller-runtime's `result` values of `controller_runtime_reconcile_total`.
const RESULTS: [&str; 4] = ["error", "requeue", "requeue_after", "success"];

/// Karpenter's `pretty.ToSnakeCase`: `RegistrationTimeout` →
/// `registration_timeout`, for the `reason` of
/// `karpenter_nodeclaims_disrupted_total`.
pub fn snake_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c == '-' || c == ' ' {
            out.push('_');
        } else {
            out.push(c);
        }
    }
    out
}

/// The metrics of one controller.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// `karpenter_voluntary_disruption_decisions_total{decision,reason,consolidation_type}`:
    /// `reason` in lower case (`empty`, `underutilized`, `drifted`).
    pub decisions: IntCounterVec,
    /// `karpenter_voluntary_disruption_decisions_by_nodepool_total{nodepool,decision,reason,consolidation_type}`
    pub decisions_by_nodepool: IntCounterVec,
    /// `karpenter_voluntary_disruption_eligible_nodes{reason}`: the
    /// candidates of each method at the last disruption pass.
    pub eligible_nodes: IntGaugeVec,
    /// `karpenter_nodepools_allowed_disruptions{nodepool,reason}`
    pub allowed_disruptions: IntGaugeVec,
    /// `karpenter_nodeclaims_disrupted_total{reason,nodepool,capacity_type}`:
    /// `reason` in snake case (`underutilized`, `expired`,
    /// `spot_interrupted`, `registration_timeout`, ...).
    pub nodeclaims_disrupted: IntCounterVec,
    /// `karpenter_nodeclaims_unhealthy_disrupted_total{condition,nodepool,capacity_type,image_id}`:
    /// node repair, by the condition in snake case (`ready`).
    pub nodeclaims_unhealthy_disrupted: IntCounterVec,
    /// `karpenter_nodes_drained_total{nodepool}`
    pub nodes_drained: IntCounterVec,
    /// `karpenter_pods_drained_total{reason}`: the NodeClaim's disruption
    /// reason, or `Forceful Termination`.
    pub pods_drained: IntCounterVec,
    /// `dovetail_consolidation_savings_dollars_per_hour`
    pub savings: Gauge,
    /// `dovetail_disruption_trials_total{method}`: removal trials run.
    pub trials: CounterVec,
    /// `karpenter_nodeclaims_created_total{reason,nodepool,min_values_relaxed}`:
    /// `reason` is `provisioned`, or the disruption reason in lower case
    /// for a replacement.
    pub nodeclaims_created: IntCounterVec,
    /// `karpenter_nodeclaims_terminated_total{nodepool,capacity_type,zone}`
    pub nodeclaims_terminated: IntCounterVec,
    /// `karpenter_nodes_created_total{nodepool,zone}`: nodes registered.
    pub nodes_created: IntCounterVec,
    /// `karpenter_nodes_terminated_total{nodepool,zone}`: nodes released.
    pub nodes_terminated: IntCounterVec,
    /// `karpenter_nodes_termination_duration_seconds{nodepool}`: from the
    /// deletion of a node (or of its NodeClaim, which deletes it) to the
    /// removal of its finalizer.
    pub node_termination_duration: SummaryVec,
    /// `karpenter_pods_startup_duration_seconds`: from a pod's creation to
    /// its `Ready` condition, for pods seen pending.
    pub pod_startup_duration: SummaryVec,
    /// `karpenter_scheduler_scheduling_duration_seconds`: one solve.
    pub scheduling_duration: Histogram,
    /// `karpenter_cloudprovider_duration_seconds{controller,method,provider}`
    /// (see [`Metered`]).
    pub cloudprovider_duration: HistogramVec,
    /// `controller_runtime_reconcile_time_seconds{controller}`
    pub reconcile_time: HistogramVec,
    /// `controller_runtime_reconcile_total{controller,result}`
    pub reconcile_total: IntCounterVec,
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

/// Times one reconcile into the reconcile metrics when dropped.
pub struct ReconcileTimer {
    started: Instant,
    time: Histogram,
    total: IntCounter,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.time.observe(self.started.elapsed().as_secs_f64());
        self.total.inc();
    }
}

impl Metrics {
    /// The metrics, registered in a new registry; summaries age on the
    /// system clock.
    pub fn new() -> Self {
        Metrics::with_clock(Arc::new(SystemClock))
    }

    /// The metrics, registered in a new registry; summaries age on `clock`
    /// (the simulation's virtual clock).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            register(&registry, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let decisions = counter(
            "karpenter_voluntary_disruption_decisions_total",
            "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
            &["decision", "reason", "consolidation_type"],
        );
        let decisions_by_nodepool = counter(
            "karpenter_voluntary_disruption_decisions_by_nodepool_total",
            "Number of disruption decisions performed by nodepool. Labeled by nodepool name, disruption decision, reason, and consolidation type.",
            &["nodepool", "decision", "reason", "consolidation_type"],
        );
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            register(&registry, IntGaugeVec::new(Opts::new(name, help), labels))
        };
        let eligible_nodes = gauge(
            "karpenter_voluntary_disruption_eligible_nodes",
            "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.",
            &["reason"],
        );
        let allowed_disruptions = gauge(
            "karpenter_nodepools_allowed_disruptions",
            "Nodes each NodePool's budgets allow to be disrupted now, by reason.",
            &["nodepool", "reason"],
        );
        let nodeclaims_disrupted = counter(
            "karpenter_nodeclaims_disrupted_total",
            "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the nodeclaim was disrupted and the owning nodepool.",
            &["reason", "nodepool", "capacity_type"],
        );
        let nodeclaims_unhealthy_disrupted = counter(
            "karpenter_nodeclaims_unhealthy_disrupted_total",
            "Number of unhealthy nodeclaims disrupted in total by Karpenter. Labeled by condition on the node was disrupted, the owning nodepool, and the image ID.",
            &["condition", "nodepool", "capacity_type", "image_id"],
        );
        let nodes_drained = counter(
            "karpenter_nodes_drained_total",
            "The total number of nodes drained by Karpenter",
            &["nodepool"],
        );
        let pods_drained = counter(
            "karpenter_pods_drained_total",
            "The total number of pods drained during node termination by Karpenter, labeled by reason",
            &["reason"],
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
        let nodeclaims_created = counter(
            "karpenter_nodeclaims_created_total",
            "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created, the owning nodepool, and if min values was relaxed for this nodeclaim.",
            &["reason", "nodepool", "min_values_relaxed"],
        );
        let nodeclaims_terminated = counter(
            "karpenter_nodeclaims_terminated_total",
            "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool, capacity type, and zone.",
            &["nodepool", "capacity_type", "zone"],
        );
        let nodes_created = counter(
            "karpenter_nodes_created_total",
            "Number of nodes created in total by Karpenter. Labeled by owning nodepool and zone.",
            &["nodepool", "zone"],
        );
        let nodes_terminated = counter(
            "karpenter_nodes_terminated_total",
            "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool and zone.",
            &["nodepool", "zone"],
        );
        let node_termination_duration = register(
            &registry,
            SummaryVec::new(
                "karpenter_nodes_termination_duration_seconds",
                "The time taken between a node's deletion request and the removal of its finalizer",
                &["nodepool"],
                clock.clone(),
            ),
        );
        let pod_startup_duration = register(
            &registry,
            SummaryVec::new(
                "karpenter_pods_startup_duration_seconds",
                "The time from pod creation until the pod is running.",
                &[],
                clock,
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
        let reconcile_time = register(
            &registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "controller_runtime_reconcile_time_seconds",
                    "Length of time per reconciliation per controller",
                )
                .buckets(RECONCILE_BUCKETS.to_vec()),
                &["controller"],
            ),
        );
        let reconcile_total = counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            &["controller", "result"],
        );
        // As controller-runtime does when a controller starts: every
        // controller's series exist from the start, at zero.
        for c in controllers::ALL {
            reconcile_time.with_label_values(&[c]);
            for r in RESULTS {
                reconcile_total.with_label_values(&[c, r]);
            }
        }
        Metrics {
            registry,
            decisions,
            decisions_by_nodepool,
            eligible_nodes,
            allowed_disruptions,
            nodeclaims_disrupted,
            nodeclaims_unhealthy_disrupted,
            nodes_drained,
            pods_drained,
            savings,
            trials,
            nodeclaims_created,
            nodeclaims_terminated,
            nodes_created,
            nodes_terminated,
            node_termination_duration,
            pod_startup_duration,
            scheduling_duration,
            cloudprovider_duration,
            reconcile_time,
            reconcile_total,
        }
    }

    /// The registry, for a `/metrics` endpoint.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Starts timing one reconcile of `controller` (one of
    /// [`controllers`]); it is counted, with the result `requeue_after`
    /// (every loop says when it next needs to run), when the timer drops.
    pub fn reconcile(&self, controller: &str) -> ReconcileTimer {
        ReconcileTimer {
            started: Instant::now(),
            time: self.reconcile_time.with_label_values(&[controller]),
            total: self
                .reconcile_total
                .with_label_values(&[controller, "requeue_after"]),
        }
    }

    /// A NodeClaim disrupted (deleted by dovetail) for `reason`, as
    /// Karpenter spells it in `karpenter_nodeclaims_disrupted_total`.
    pub fn disrupted(&self, claim: &NodeClaim, reason: &str) {
        let label = |k: &str| crate::api::label_or_empty(&claim.metadata, k);
        self.nodeclaims_disrupted
            .with_label_values(&[
                snake_case(reason).as_str(),
                label(crate::api::LABEL_NODEPOOL),
                label(crate::api::LABEL_CAPACITY_TYPE),
            ])
            .inc();
    }

    /// A voluntary disruption decision carried out over candidates of the
    /// given NodePools.
    pub fn decided<'a>(
        &self,
        decision: &str,
        reason: &str,
        consolidation_type: &str,
        nodepools: impl IntoIterator<Item = &'a str>,
    ) {
        let reason = reason.to_lowercase();
        self.decisions
            .with_label_values(&[decision, reason.as_str(), consolidation_type])
            .inc();
        let pools: std::collections::BTreeSet<&str> = nodepools.into_iter().collect();
        for pool in pools {
            self.decisions_by_nodepool
                .with_label_values(&[pool, decision, reason.as_str(), consolidation_type])
                .inc();
        }
    }

    /// The candidates each voluntary method could take at a disruption
    /// pass, as `karpenter_voluntary_disruption_eligible_nodes`: empty
    /// nodes past `consolidateAfter`, drifted nodes, and underused nodes of
    /// pools that consolidate them; none that is blocked for the method.
    pub fn eligible(&self, candidates: &[crate::disruption::Candidate]) {
        let (mut empty, mut drifted, mut underutilized) = (0, 0, 0);
        for c in candidates {
            let consolidation =
                !c.static_pool && c.consolidatable && c.blocked_for_consolidation().is_none();
            if consolidation && c.is_empty() {
                empty += 1;
            }
            if consolidation && c.underutilized {
                underutilized += 1;
            }
            if !c.drift.is_empty() && c.blocked_for_drift().is_none() {
                drifted += 1;
            }
        }
        for (reason, n) in [
            ("empty", empty),
            ("drifted", drifted),
            ("underutilized", underutilized),
        ] {
            self.eligible_nodes.with_label_values(&[reason]).set(n);
        }
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

    async fn list(&self) -> Result<Vec<Arc<Instance>>, CloudError> {
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
    use crate::world::ec2::{SimConfig, SimEc2};

    #[test]
    fn reasons_are_spelled_as_the_reference_spells_them() {
        assert_eq!(snake_case("RegistrationTimeout"), "registration_timeout");
        assert_eq!(snake_case("Underutilized"), "underutilized");
        assert_eq!(snake_case("spot_interrupted"), "spot_interrupted");
        assert_eq!(snake_case("garbage_collected"), "garbage_collected");
        let m = Metrics::new();
        m.decided("replace", "Underutilized", "single", ["general", "general"]);
        m.decided("delete", "Drifted", "", ["general", "batch"]);
        let text = crate::metrics::exposition::text(&m.registry().gather());
        for line in [
            "karpenter_voluntary_disruption_decisions_total{consolidation_type=\"single\",decision=\"replace\",reason=\"underutilized\"} 1",
            "karpenter_voluntary_disruption_decisions_total{consolidation_type=\"\",decision=\"delete\",reason=\"drifted\"} 1",
            // One decision counts once per NodePool it touches.
            "karpenter_voluntary_disruption_decisions_by_nodepool_total{consolidation_type=\"single\",decision=\"replace\",nodepool=\"general\",reason=\"underutilized\"} 1",
            "karpenter_voluntary_disruption_decisions_by_nodepool_total{consolidation_type=\"\",decision=\"delete\",nodepool=\"batch\",reason=\"drifted\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn every_loop_has_its_reconcile_series_from_the_start() {
        let m = Metrics::new();
        drop(m.reconcile(controllers::DISRUPTION));
        let text = crate::metrics::exposition::text(&m.registry().gather());
        for c in controllers::ALL {
            let runs = u64::from(c == controllers::DISRUPTION);
            assert!(text.contains(&format!(
                "controller_runtime_reconcile_total{{controller=\"{c}\",result=\"requeue_after\"}} {runs}"
            )), "{c}: {text}");
            assert!(
                text.contains(&format!(
                    "controller_runtime_reconcile_time_seconds_count{{controller=\"{c}\"}} {runs}"
                )),
                "{c}: {text}"
            );
            assert!(
                text.contains(&format!(
                    "controller_runtime_reconcile_total{{controller=\"{c}\",result=\"error\"}} 0"
                )),
                "{c}: {text}"
            );
        }
    }

    #[test]
    fn eligible_nodes_count_each_method_s_candidates() {
        let base = crate::disruption::Candidate {
            pods: 0,
            capacity_type: "spot".into(),
            ..crate::disruption::Candidate::test("n", "m7i.large", 0.1)
        };
        let busy = crate::disruption::Candidate {
            pods: 3,
            ..base.clone()
        };
        let protected = crate::disruption::Candidate {
            pods: 3,
            pods_blocked: Some("a PodDisruptionBudget".into()),
            drift: vec![DriftReason::Ami {
                image: "ami-old".into(),
            }],
            ..base.clone()
        };
        let m = Metrics::new();
        m.eligible(&[base, busy, protected]);
        let get = |r: &str| m.eligible_nodes.with_label_values(&[r]).get();
        assert_eq!(
            (get("empty"), get("underutilized"), get("drifted")),
            (1, 2, 0)
        );
    }

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
