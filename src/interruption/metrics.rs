//! The interruption metrics, in a registry the caller owns (not the
//! process-global default), like the sync engine's. The three
//! `karpenter_interruption_*` series keep the reference autoscaler's names
//! so its dashboards work; dovetail's own are `dovetail_interruption_*`.

use std::time::Duration;

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

use super::message::METRIC_KINDS;
use crate::clock::Timestamp;
use crate::metrics::register;

/// Time in the queue: EventBridge delivers in well under a second; a
/// backlog (the controller was down) lasts minutes.
const QUEUE_BUCKETS: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0,
];
/// Receipt to NodeClaim marked for deletion: the target is 100 ms at p99.
const HANDLING_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// The metrics of one interruption poller (and the handler it feeds).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    received: IntCounterVec,
    deleted: IntCounter,
    queue_duration: Histogram,
    handling: Histogram,
    undecodable: IntCounterVec,
    handler_errors: IntCounterVec,
    sqs_errors: IntCounterVec,
    queue_healthy: IntGauge,
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

fn seconds(from: Timestamp, to: Timestamp) -> f64 {
    // A clock that went backwards counts as no time.
    Duration::try_from(to.duration_since(from))
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Metrics {
    /// The metrics, registered in a new registry.
    pub fn new() -> Self {
        let registry = Registry::new();
        let received = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "karpenter_interruption_received_messages_total",
                    "Count of messages received from the SQS queue. Broken down by message type: spot_interrupted, rebalance_recommendation, scheduled_change, instance_stopped, instance_terminated, or no_op (ignored); undecodable messages are dovetail_interruption_undecodable_messages_total.",
                ),
                &["message_type"],
            ),
        );
        let deleted = register(
            &registry,
            IntCounter::with_opts(Opts::new(
                "karpenter_interruption_deleted_messages_total",
                "Messages deleted from the interruption queue.",
            )),
        );
        let queue_duration = register(
            &registry,
            Histogram::with_opts(
                HistogramOpts::new(
                    "karpenter_interruption_message_queue_duration_seconds",
                    "Time from a message's arrival in the queue (SQS SentTimestamp, else the event's time) to its receipt.",
                )
                .buckets(QUEUE_BUCKETS.to_vec()),
            ),
        );
        let handling = register(
            &registry,
            Histogram::with_opts(
                HistogramOpts::new(
                    "dovetail_interruption_handling_seconds",
                    "Time from a message's receipt to its NodeClaim marked for deletion.",
                )
                .buckets(HANDLING_BUCKETS.to_vec()),
            ),
        );
        let undecodable = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "dovetail_interruption_undecodable_messages_total",
                    "Messages that could not be decoded (and were deleted), by reason: too_large, envelope, time, detail, instance_id.",
                ),
                &["reason"],
            ),
        );
        let handler_errors = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "dovetail_interruption_handler_errors_total",
                    "Messages the handler failed (left in the queue for redelivery), by reason.",
                ),
                &["reason"],
            ),
        );
        let sqs_errors = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "dovetail_interruption_sqs_errors_total",
                    "Failed SQS calls, by operation: get_queue_url, receive, delete (per message).",
                ),
                &["operation"],
            ),
        );
        let queue_healthy = register(
            &registry,
            IntGauge::with_opts(Opts::new(
                "dovetail_interruption_queue_healthy",
                "1 while the interruption queue answers; 0 since its URL did not resolve or a ReceiveMessage failed (queue deleted, access denied, unreachable).",
            )),
        );
        // Every bounded label value starts at zero, so dashboards see the
        // series before the first message of a kind.
        for label in METRIC_KINDS {
            received.with_label_values(&[label]);
        }
        Metrics {
            registry,
            received,
            deleted,
            queue_duration,
            handling,
            undecodable,
            handler_errors,
            sqs_errors,
            queue_healthy,
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

    /// Records that the handler marked a NodeClaim for deletion at
    /// `marked_at` for a message received at `received_at` (the time the
    /// handler was given). Call it once per NodeClaim.
    pub fn observe_marked(&self, received_at: Timestamp, marked_at: Timestamp) {
        self.handling.observe(seconds(received_at, marked_at));
    }

    pub(super) fn count_received(&self, message_type: &str) {
        self.received.with_label_values(&[message_type]).inc();
    }

    /// A message that could not be decoded: as in the reference, it is not
    /// counted as received.
    pub(super) fn count_undecodable(&self, reason: &'static str) {
        self.undecodable.with_label_values(&[reason]).inc();
    }

    pub(super) fn count_handler_error(&self, reason: &'static str) {
        self.handler_errors.with_label_values(&[reason]).inc();
    }

    pub(super) fn observe_queued(&self, queued_at: Timestamp, received_at: Timestamp) {
        self.queue_duration.observe(seconds(queued_at, received_at));
    }

    pub(super) fn count_deleted(&self, n: usize) {
        self.deleted.inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }

    pub fn count_sqs_error(&self, operation: &'static str, n: usize) {
        self.sqs_errors
            .with_label_values(&[operation])
            .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }

    /// Whether the queue answered the last call made to it.
    pub fn set_queue_healthy(&self, healthy: bool) {
        self.queue_healthy.set(i64::from(healthy));
    }

    /// Whether the queue answered the last call made to it.
    pub fn queue_healthy(&self) -> bool {
        self.queue_healthy.get() == 1
    }

    /// Messages received with `message_type` so far.
    pub fn received(&self, message_type: &str) -> u64 {
        self.received.with_label_values(&[message_type]).get()
    }

    /// Messages deleted from the queue so far.
    pub fn deleted(&self) -> u64 {
        self.deleted.get()
    }

    /// Undecodable messages with `reason` so far.
    pub fn undecodable(&self, reason: &str) -> u64 {
        self.undecodable.with_label_values(&[reason]).get()
    }

    /// Handler errors with `reason` so far.
    pub fn handler_errors(&self, reason: &str) -> u64 {
        self.handler_errors.with_label_values(&[reason]).get()
    }

    /// Failed SQS calls of `operation` so far.
    pub fn sqs_errors(&self, operation: &str) -> u64 {
        self.sqs_errors.with_label_values(&[operation]).get()
    }

    /// How many NodeClaims were marked, and the summed seconds.
    pub fn handling(&self) -> (u64, f64) {
        (
            self.handling.get_sample_count(),
            self.handling.get_sample_sum(),
        )
    }
}
