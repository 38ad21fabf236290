//! The sync metrics, in a registry the engine owns (not the process-global
//! default), so engines and tests are independent. The process that serves
//! `/metrics` gathers this registry beside its others.

use std::time::Duration;

use prometheus::{
    Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::api::ApiKind;
use crate::metrics::register;

/// Upper bounds of the pass-duration buckets: a pass is milliseconds on a
/// small repository, seconds with a slow API server.
const DURATION_BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// The metrics of one sync engine.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    duration: Histogram,
    revision: IntGaugeVec,
    objects: IntGaugeVec,
    errors: IntCounterVec,
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
        let duration = register(
            &registry,
            Histogram::with_opts(
                HistogramOpts::new(
                    "dovetail_config_sync_duration_seconds",
                    "Time of one sync pass: reading and validating the revision, dry runs, applies and prunes.",
                )
                .buckets(DURATION_BUCKETS.to_vec()),
            ),
        );
        let revision = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "dovetail_config_revision_info",
                    "The revision last applied completely (value 1), as <branch>@sha1:<sha>.",
                ),
                &["revision"],
            ),
        );
        let objects = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "dovetail_config_objects",
                    "Objects of the revision last applied completely, by kind.",
                ),
                &["kind"],
            ),
        );
        let errors = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "dovetail_config_sync_errors_total",
                    "Sync passes that failed, by reason: invalid (the revision does not validate), source (the repository or ref cannot be read), apply (the API server refused or failed a write), prune_blocked (more deletions than --max-prune).",
                ),
                &["reason"],
            ),
        );
        Metrics {
            registry,
            duration,
            revision,
            objects,
            errors,
        }
    }

    /// The registry, for a `/metrics` endpoint.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The metrics in Prometheus' text format.
    pub fn text(&self) -> String {
        TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_default()
    }

    pub(super) fn observe_pass(&self, took: Duration) {
        self.duration.observe(took.as_secs_f64());
    }

    pub(super) fn error(&self, reason: &'static str) {
        self.errors.with_label_values(&[reason]).inc();
    }

    /// Records a completely applied revision and its object counts.
    pub(super) fn applied(&self, revision: &str, counts: &[(ApiKind, usize)]) {
        self.revision.reset();
        self.revision.with_label_values(&[revision]).set(1);
        for (kind, n) in counts {
            self.objects
                .with_label_values(&[kind.kind()])
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
    }

    /// The count of errors with `reason` so far (for tests and status).
    pub fn errors(&self, reason: &str) -> u64 {
        self.errors.with_label_values(&[reason]).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_are_independent_and_the_revision_is_replaced() {
        let (a, b) = (Metrics::new(), Metrics::new());
        a.error("invalid");
        a.applied("main@sha1:1", &[(ApiKind::NodePool, 2)]);
        a.applied(
            "main@sha1:2",
            &[(ApiKind::NodePool, 3), (ApiKind::EC2NodeClass, 1)],
        );
        a.observe_pass(Duration::from_millis(3));
        let text = a.text();
        assert!(
            text.contains("dovetail_config_sync_errors_total{reason=\"invalid\"} 1"),
            "{text}"
        );
        assert!(text.contains("dovetail_config_revision_info{revision=\"main@sha1:2\"} 1"));
        assert!(!text.contains("main@sha1:1"));
        assert!(text.contains("dovetail_config_objects{kind=\"NodePool\"} 3"));
        assert!(text.contains("dovetail_config_sync_duration_seconds_count 1"));
        assert_eq!(b.errors("invalid"), 0);
    }
}
