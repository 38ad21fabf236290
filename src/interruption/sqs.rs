//! The interruption queue poller on `aws-sdk-sqs`: long-poll
//! ReceiveMessage, hand every message to [`super::deliver`] concurrently,
//! then delete those that were handled, ignored or undecodable in one
//! DeleteMessageBatch. A message whose handler failed is not deleted and
//! comes back after the queue's visibility timeout.
//!
//! The poller keeps running through SQS errors (logged, counted, retried
//! with backoff) until its shutdown signal resolves; a batch being
//! handled when it does is finished and deleted first.
//!
//! SQS actions called: `sqs:GetQueueUrl` (a queue given by name),
//! `sqs:ReceiveMessage`, `sqs:DeleteMessage` (DeleteMessageBatch is
//! authorised as DeleteMessage).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use futures::future::join_all;
use tokio::sync::watch;

use super::{MessageHandler, Metrics, deliver};
use crate::clock::{Clock, Timestamp};

/// SQS returns at most 10 messages per ReceiveMessage.
const MAX_MESSAGES_LIMIT: i32 = 10;
/// SQS long polls for at most 20 s.
const MAX_WAIT: Duration = Duration::from_secs(20);
/// SQS's largest visibility timeout: 12 hours.
const MAX_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(12 * 3600);

/// The queue: a URL (`https://sqs.<region>.amazonaws.com/<account>/<name>`)
/// or a name, resolved with GetQueueUrl.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Queue {
    Url(String),
    Name(String),
}

impl Queue {
    /// A URL when `s` starts with `https://` or `http://`, else a name.
    pub fn new(s: &str) -> Queue {
        if s.starts_with("https://") || s.starts_with("http://") {
            Queue::Url(s.to_string())
        } else {
            Queue::Name(s.to_string())
        }
    }
}

/// How the poller receives.
#[derive(Debug, Clone, PartialEq)]
pub struct PollSettings {
    /// Messages per ReceiveMessage (1 to 10).
    pub max_messages: i32,
    /// The long poll's wait (up to 20 s).
    pub wait: Duration,
    /// The visibility timeout of received messages; `None` keeps the
    /// queue's. A message whose handler failed is received again after it.
    pub visibility_timeout: Option<Duration>,
    /// Long polls in flight at once. One keeps up with a few hundred
    /// messages a second; more drain a backlog faster.
    pub receivers: usize,
    /// The first wait after a failed SQS call; it doubles up to `max_backoff`.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for PollSettings {
    fn default() -> Self {
        PollSettings {
            max_messages: MAX_MESSAGES_LIMIT,
            wait: MAX_WAIT,
            visibility_timeout: None,
            receivers: 1,
            min_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// A failed SQS call.
#[derive(Debug, thiserror::Error)]
pub enum SqsError {
    #[error("cannot resolve the URL of queue {name:?}")]
    GetQueueUrl {
        name: String,
        #[source]
        source: Box<aws_sdk_sqs::Error>,
    },
    #[error("GetQueueUrl returned no URL for queue {name:?}")]
    NoQueueUrl { name: String },
    #[error("receiving messages failed")]
    Receive(#[source] Box<aws_sdk_sqs::Error>),
    #[error("deleting messages failed")]
    Delete(#[source] Box<aws_sdk_sqs::Error>),
}

impl SqsError {
    /// The service's error code, if it answered with one.
    pub fn code(&self) -> Option<&str> {
        use aws_sdk_sqs::error::ProvideErrorMetadata;
        match self {
            SqsError::GetQueueUrl { source, .. } => source.code(),
            SqsError::Receive(e) | SqsError::Delete(e) => e.code(),
            SqsError::NoQueueUrl { .. } => None,
        }
    }

    /// AWS refused the session token as expired: the credentials are
    /// loaded again ([`crate::cloud::aws::credentials`]).
    pub fn expired_credentials(&self) -> bool {
        matches!(
            self.code(),
            Some("ExpiredToken" | "ExpiredTokenException" | "RequestExpired")
        )
    }
}

/// What one receive did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Batch {
    pub received: usize,
    /// Deleted from the queue (handled, ignored or undecodable).
    pub deleted: usize,
    /// Left for redelivery because the handler failed.
    pub failed: usize,
    /// To be deleted, but the deletion failed (they come back).
    pub not_deleted: usize,
}

/// Polls one queue and hands its messages to a handler.
pub struct Poller<H> {
    sqs: Client,
    queue_url: String,
    handler: H,
    metrics: Metrics,
    clock: Arc<dyn Clock>,
    settings: PollSettings,
}

/// `SentTimestamp`: milliseconds since the epoch.
fn sent_at(message: &aws_sdk_sqs::types::Message) -> Option<Timestamp> {
    let millis = message
        .attributes()?
        .get(&MessageSystemAttributeName::SentTimestamp)?
        .parse::<i64>()
        .ok()?;
    Timestamp::from_millisecond(millis).ok()
}

fn seconds_i32(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX)
}

impl<H: MessageHandler> Poller<H> {
    /// A poller for `queue` (its URL resolved now when given by name).
    /// `clock` stamps receipts (the wall clock in production).
    pub async fn connect(
        sqs: Client,
        queue: Queue,
        handler: H,
        metrics: Metrics,
        clock: Arc<dyn Clock>,
        settings: PollSettings,
    ) -> Result<Self, SqsError> {
        let queue_url = match queue {
            Queue::Url(url) => url,
            Queue::Name(name) => {
                let out = sqs
                    .get_queue_url()
                    .queue_name(&name)
                    .send()
                    .await
                    .map_err(|e| SqsError::GetQueueUrl {
                        name: name.clone(),
                        source: Box::new(e.into()),
                    })?;
                out.queue_url()
                    .map(str::to_string)
                    .ok_or(SqsError::NoQueueUrl { name })?
            }
        };
        Ok(Poller {
            sqs,
            queue_url,
            handler,
            metrics,
            clock,
            settings,
        })
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn handler(&self) -> &H {
        &self.handler
    }

    async fn receive(&self) -> Result<Vec<aws_sdk_sqs::types::Message>, SqsError> {
        let s = &self.settings;
        let mut request = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(s.max_messages.clamp(1, MAX_MESSAGES_LIMIT))
            .wait_time_seconds(seconds_i32(s.wait.min(MAX_WAIT)))
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp);
        if let Some(timeout) = s.visibility_timeout {
            request = request.visibility_timeout(seconds_i32(timeout.min(MAX_VISIBILITY_TIMEOUT)));
        }
        let out = request
            .send()
            .await
            .map_err(|e| SqsError::Receive(Box::new(e.into())))?;
        Ok(out.messages.unwrap_or_default())
    }

    /// Handles received messages concurrently, then deletes in one batch
    /// those that are done.
    async fn handle(&self, messages: Vec<aws_sdk_sqs::types::Message>) -> Batch {
        let received_at = self.clock.now();
        let outcomes = join_all(messages.iter().map(|m| {
            deliver(
                m.body().unwrap_or_default(),
                sent_at(m),
                received_at,
                &self.handler,
                &self.metrics,
            )
        }))
        .await;
        let mut batch = Batch {
            received: messages.len(),
            ..Batch::default()
        };
        let mut entries = Vec::with_capacity(messages.len());
        for (i, (message, outcome)) in messages.iter().zip(&outcomes).enumerate() {
            if !outcome.delete() {
                batch.failed += 1;
                continue;
            }
            let entry = message.receipt_handle().and_then(|handle| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(handle)
                    .build()
                    .ok()
            });
            match entry {
                Some(entry) => entries.push(entry),
                None => {
                    tracing::warn!(message_id = ?message.message_id(), "received message has no receipt handle; cannot delete it");
                    batch.not_deleted += 1;
                }
            }
        }
        if entries.is_empty() {
            return batch;
        }
        let requested = entries.len();
        match self
            .sqs
            .delete_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(out) => {
                batch.deleted = out.successful().len();
                for failure in out.failed() {
                    tracing::warn!(
                        entry = failure.id(),
                        code = failure.code(),
                        message = failure.message().unwrap_or_default(),
                        "deleting an interruption message failed; it will be received again"
                    );
                }
                batch.not_deleted += requested - batch.deleted.min(requested);
            }
            Err(e) => {
                let e = SqsError::Delete(Box::new(e.into()));
                tracing::warn!(error = %DisplayErrorContext(&e), "deleting interruption messages failed; they will be received again");
                batch.not_deleted += requested;
            }
        }
        self.metrics.count_deleted(batch.deleted);
        if batch.not_deleted > 0 {
            self.metrics.count_sqs_error("delete", batch.not_deleted);
        }
        batch
    }

    /// One long poll, its messages handled and deleted.
    pub async fn poll_once(&self) -> Result<Batch, SqsError> {
        let messages = self.receive().await?;
        if messages.is_empty() {
            return Ok(Batch::default());
        }
        Ok(self.handle(messages).await)
    }

    /// Polls until `shutdown` resolves (e.g. a cancellation token's
    /// `cancelled()`, or a watch channel's `changed()`). Long polls in
    /// flight are abandoned (their messages, if any, come back after the
    /// visibility timeout); a batch being handled is finished first.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let receivers = join_all(
            (0..self.settings.receivers.max(1)).map(|_| self.receive_loop(stop_rx.clone())),
        );
        tokio::pin!(receivers);
        tokio::pin!(shutdown);
        tokio::select! {
            _ = &mut receivers => {}
            () = &mut shutdown => {
                // Receivers stop at their next await on the signal.
                let _ = stop_tx.send(true);
                receivers.await;
            }
        }
        tracing::info!(queue = %self.queue_url, "interruption poller stopped");
    }

    async fn receive_loop(&self, mut stop: watch::Receiver<bool>) {
        let mut backoff = self.settings.min_backoff;
        loop {
            if *stop.borrow() {
                return;
            }
            let received = tokio::select! {
                biased;
                _ = stop.changed() => return,
                r = self.receive() => r,
            };
            self.metrics.set_queue_healthy(received.is_ok());
            match received {
                Ok(messages) => {
                    backoff = self.settings.min_backoff;
                    if !messages.is_empty() {
                        self.handle(messages).await;
                    }
                }
                Err(e) => {
                    self.metrics.count_sqs_error("receive", 1);
                    if e.expired_credentials() {
                        crate::cloud::aws::credentials::expire();
                    }
                    tracing::warn!(queue = %self.queue_url, error = %DisplayErrorContext(&e), retry_in = ?backoff, "receiving interruption messages failed");
                    tokio::select! {
                        biased;
                        _ = stop.changed() => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(self.settings.max_backoff);
                }
            }
        }
    }
}
