//! Spot interruptions and instance health events: EC2 and AWS Health
//! events that EventBridge routes to an SQS queue, and what the controller
//! does about them.
//!
//! - [`message`]: the EventBridge envelope and the parsers (pure, bounded);
//! - [`decide()`]: the actions for a message (pure): mark the spot offering
//!   unavailable, delete the NodeClaim (disruption reason `Interrupted`),
//!   record an event;
//! - [`events`]: real-shaped event JSON, for the simulated EC2 and tests;
//! - [`deliver`]: one message body through parsing, metrics and a
//!   [`MessageHandler`], shared by the SQS poller and the simulation;
//! - [`sqs`]: the poller on `aws-sdk-sqs` (long polls, concurrent
//!   handling, deletion);
//! - [`metrics`]: the Prometheus metrics.
//!
//! The controller implements [`MessageHandler`]: it looks each instance up
//! in its provider-id index, calls [`decide()`], applies the actions, and
//! reports each NodeClaim marked for deletion to
//! [`Metrics::observe_marked`].
//!
//! This module never depends on `controller`; the controller implements
//! `MessageHandler` (`controller::interruption`).

pub mod decide;
pub mod events;
pub mod message;
pub mod metrics;
pub mod sqs;

use std::future::Future;
use std::sync::Arc;

pub use decide::{
    Action, ClaimInfo, ClaimLookup, Options, REASON_INSTANCE_NOT_MANAGED, REASON_INTERRUPTED,
    REASON_REBALANCE_RECOMMENDATION, decide, instance_id_of,
};
pub use message::{
    Detail, Envelope, Ignored, IgnoredKind, InstanceState, Kind, MAX_MESSAGE_BYTES, Message,
    ParseError, Parsed, parse, parse_bytes,
};
pub use metrics::Metrics;
pub use sqs::{PollSettings, Poller, Queue, SqsError};

use crate::clock::Timestamp;

/// Why a handler could not handle a message. The message stays in the
/// queue and is received again after its visibility timeout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// The controller cannot take messages now (not started, shutting
    /// down, its cache not synced).
    #[error("the controller is not accepting interruption messages")]
    Unavailable,
    /// Applying an action failed.
    #[error("handling the message failed: {0}")]
    Failed(String),
}

impl HandlerError {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            HandlerError::Unavailable => "unavailable",
            HandlerError::Failed(_) => "failed",
        }
    }
}

/// Acts on decoded messages. The poller calls it for every message of a
/// kind dovetail acts on, concurrently for the messages of one receive,
/// and deletes the message when it returns `Ok`. `received_at` is when the
/// poller received the message, for [`Metrics::observe_marked`].
///
/// Messages are delivered at least once (a deletion can fail, a handler
/// error makes SQS deliver again), so handling must be idempotent:
/// deleting a NodeClaim already being deleted changes nothing.
pub trait MessageHandler: Send + Sync {
    fn handle(
        &self,
        message: Message,
        received_at: Timestamp,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;
}

impl<H: MessageHandler> MessageHandler for Arc<H> {
    fn handle(
        &self,
        message: Message,
        received_at: Timestamp,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        (**self).handle(message, received_at)
    }
}

impl<H: MessageHandler> MessageHandler for &H {
    fn handle(
        &self,
        message: Message,
        received_at: Timestamp,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        (**self).handle(message, received_at)
    }
}

/// What became of one message.
#[derive(Debug)]
pub enum Outcome {
    /// The handler handled it.
    Handled(Kind),
    /// A well-formed event dovetail does not act on.
    Ignored(IgnoredKind),
    /// Not an event dovetail can read.
    Undecodable(ParseError),
    /// The handler failed.
    Failed(HandlerError),
}

impl Outcome {
    /// Whether the message is deleted from the queue: every outcome but a
    /// handler error (undecodable messages too, or they would come back
    /// forever).
    pub fn delete(&self) -> bool {
        !matches!(self, Outcome::Failed(_))
    }
}

/// Takes one message body through the parser, the metrics and the
/// handler. `queued_at` is when it entered the queue (SQS's
/// `SentTimestamp`); without it, the event's own time is used.
pub async fn deliver<H: MessageHandler>(
    body: &str,
    queued_at: Option<Timestamp>,
    received_at: Timestamp,
    handler: &H,
    metrics: &Metrics,
) -> Outcome {
    let parsed = match parse(body) {
        Ok(parsed) => parsed,
        Err(e) => {
            metrics.count_undecodable(e.metric_label());
            tracing::warn!(
                error = %e,
                cause = e_source(&e),
                bytes = body.len(),
                "undecodable interruption message; deleting it"
            );
            return Outcome::Undecodable(e);
        }
    };
    metrics.count_received(parsed.label());
    match parsed {
        Parsed::Ignored(ignored) => {
            tracing::debug!(id = %ignored.id, kind = ignored.kind.as_str(), "ignored interruption message");
            Outcome::Ignored(ignored.kind)
        }
        Parsed::Message(message) => {
            metrics.observe_queued(queued_at.unwrap_or(message.time), received_at);
            let kind = message.kind();
            let id = message.id.clone();
            match handler.handle(message, received_at).await {
                Ok(()) => Outcome::Handled(kind),
                Err(e) => {
                    metrics.count_handler_error(e.metric_label());
                    tracing::warn!(id = %id, kind = kind.as_str(), error = %e, "interruption message left for redelivery");
                    Outcome::Failed(e)
                }
            }
        }
    }
}

/// The error's cause, for a log field.
fn e_source(e: &ParseError) -> String {
    std::error::Error::source(e)
        .map(ToString::to_string)
        .unwrap_or_default()
}
