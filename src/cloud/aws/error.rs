//! Errors of AWS calls, and the one place they are retried.
//!
//! Every SDK call goes through [`call`], named by the IAM action it needs
//! (`ec2:DescribeInstances`). The SDK's own retries are disabled (see
//! [`super::config`]) so that this is the only retry loop:
//! - throttling (`RequestLimitExceeded`, `Throttling`, ...) and transient
//!   failures (5xx, timeouts, connection errors) are retried with capped
//!   exponential backoff and full jitter, up to [`RetrySettings::max_attempts`];
//! - an action still throttled after every attempt cools down: for
//!   [`COOLDOWN_BASE`], doubling with each call that ends throttled in a
//!   row up to [`COOLDOWN_CAP`], its calls fail at once without being sent
//!   (as the SDKs' client-side rate limiting does), so however many
//!   NodeClaims wait on an action, a throttled account sees a bounded
//!   number of requests (calls of the action retrying meanwhile stop at
//!   their next attempt); the first call that gets an answer ends it;
//! - an expired session token (`ExpiredToken`, `RequestExpired`, ...)
//!   makes the credentials load again ([`super::credentials`]) and the call
//!   is tried again;
//! - access denied becomes [`AwsError::AccessDenied`] naming the IAM action
//!   the controller's policy must allow;
//! - every other error is returned at once with its code.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};

use crate::cloud::CloudError;

/// Error codes AWS services use for throttling.
const THROTTLING_CODES: [&str; 14] = [
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// Error codes of failures worth another attempt.
const TRANSIENT_CODES: [&str; 6] = [
    "InternalError",
    "InternalFailure",
    "InternalServerError",
    "ServiceUnavailable",
    "Unavailable",
    "RequestTimeout",
];

/// Error codes meaning the caller's policy does not allow the action.
const ACCESS_DENIED_CODES: [&str; 4] = [
    "UnauthorizedOperation",
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedAccess",
];

/// Error codes of a session token that expired (or a request signed too
/// long ago): the credentials are loaded again.
const EXPIRED_CODES: [&str; 4] = [
    "ExpiredToken",
    "ExpiredTokenException",
    "RequestExpired",
    "InvalidClientTokenId",
];

/// The first cool-down of an action that stayed throttled through every
/// attempt of a call...
pub const COOLDOWN_BASE: Duration = Duration::from_secs(2);
/// ...doubling per call that ends throttled in a row, up to this.
pub const COOLDOWN_CAP: Duration = Duration::from_secs(30);

/// How throttled and transient calls are retried.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrySettings {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The backoff before the second attempt; it doubles per attempt...
    pub base: Duration,
    /// ...up to this. The wait is uniformly random below the backoff.
    pub cap: Duration,
    /// The actions cooling down after throttling, shared by every call
    /// made with these settings (one provider: one account and region,
    /// which is what AWS throttles).
    pub cooldowns: Cooldowns,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_attempts: 6,
            base: Duration::from_millis(200),
            cap: Duration::from_secs(10),
            cooldowns: Cooldowns::default(),
        }
    }
}

/// Actions cooling down after throttling (see the module documentation):
/// action -> (calls that ended throttled in a row, the end of its
/// cool-down).
#[derive(Debug, Clone, Default)]
pub struct Cooldowns(Arc<Mutex<HashMap<&'static str, (u32, Instant)>>>);

impl PartialEq for Cooldowns {
    /// The same state, shared.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Cooldowns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, (u32, Instant)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What is left of `action`'s cool-down, if it is cooling down.
    pub fn left(&self, action: &str) -> Option<Duration> {
        let (_, until) = *self.lock().get(action)?;
        until
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }

    /// A call of `action` ended throttled: it cools down, longer than
    /// last time if the last call ended throttled too. Returns for how
    /// long.
    fn throttled(&self, action: &'static str) -> Duration {
        let mut state = self.lock();
        let (row, until) = state.entry(action).or_insert((0, Instant::now()));
        *row = row.saturating_add(1);
        let wait = COOLDOWN_BASE
            .saturating_mul(1 << (*row - 1).min(16))
            .min(COOLDOWN_CAP);
        *until = Instant::now() + wait;
        wait
    }

    /// A call of `action` got an answer: the cool-downs start over.
    fn answered(&self, action: &str) {
        let mut state = self.lock();
        if !state.is_empty() {
            state.remove(action);
        }
    }
}

impl RetrySettings {
    /// The wait before attempt `attempt + 1` (after `attempt` failures,
    /// counting from 1): a uniformly random duration below
    /// `min(cap, base × 2^(attempt−1))` ("full jitter").
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        let ceiling = exp.min(self.cap);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(random_u64() % nanos)
    }
}

/// A random number for jitter: std's hasher keys are random per
/// `RandomState`, which is all jitter needs (not cryptographic).
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x9e37_79b9_7f4a_7c15);
    h.finish()
}

/// A fresh idempotency token (`ClientToken`): 32 random hex digits. A
/// request sent again with the same token is not carried out twice.
pub fn client_token() -> String {
    format!("{:016x}{:016x}", random_u64(), random_u64())
}

/// Why an AWS call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AwsError {
    /// Throttled through every attempt, or (`attempts` 0) not sent: the
    /// action is cooling down after throttling.
    #[error("{action} throttled {}", crate::cloud::throttled_note(*attempts))]
    Throttled { action: &'static str, attempts: u32 },
    #[error("access denied: the controller's IAM policy must allow {action} ({code}: {message})")]
    AccessDenied {
        action: &'static str,
        code: String,
        message: String,
    },
    /// The service answered with an error.
    #[error("{action}: {code}: {message}")]
    Service {
        action: &'static str,
        code: String,
        message: String,
    },
    /// No usable answer: connection, timeout, or a response that could not
    /// be read (after the retries, when retryable).
    #[error("{action}: {message}")]
    Transport {
        action: &'static str,
        message: String,
    },
}

impl AwsError {
    /// The service's error code, if it answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            AwsError::Service { code, .. } | AwsError::AccessDenied { code, .. } => Some(code),
            _ => None,
        }
    }

    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            AwsError::Throttled { .. } => "throttled",
            AwsError::AccessDenied { .. } => "access_denied",
            AwsError::Service { .. } => "service",
            AwsError::Transport { .. } => "transport",
        }
    }
}

impl From<AwsError> for CloudError {
    fn from(e: AwsError) -> Self {
        match e {
            AwsError::Throttled { action, attempts } => CloudError::Throttled {
                action: action.to_string(),
                attempts,
            },
            AwsError::AccessDenied {
                action,
                code,
                message,
            } => CloudError::AccessDenied {
                action: action.to_string(),
                message: format!("{code}: {message}"),
            },
            other => CloudError::Api(other.to_string()),
        }
    }
}

/// What to do with a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Throttled,
    Expired,
    Transient,
    Final,
}

fn classify_code(code: Option<&str>, status: Option<u16>) -> Class {
    match code {
        Some(c) if THROTTLING_CODES.contains(&c) => Class::Throttled,
        Some(c) if EXPIRED_CODES.contains(&c) => Class::Expired,
        Some(c) if TRANSIENT_CODES.contains(&c) => Class::Transient,
        _ if status == Some(429) => Class::Throttled,
        _ if status.is_some_and(|s| (500..600).contains(&s)) => Class::Transient,
        _ => Class::Final,
    }
}

/// Converts a final SDK error.
fn convert<E: ProvideErrorMetadata + std::error::Error + 'static>(
    action: &'static str,
    err: &SdkError<E, HttpResponse>,
) -> AwsError {
    match err {
        SdkError::ServiceError(_) => {
            let code = err.code().unwrap_or("Unknown").to_string();
            let message = err.message().unwrap_or_default().to_string();
            if ACCESS_DENIED_CODES.contains(&code.as_str()) {
                AwsError::AccessDenied {
                    action,
                    code,
                    message,
                }
            } else {
                AwsError::Service {
                    action,
                    code,
                    message,
                }
            }
        }
        SdkError::ConstructionFailure(_) => AwsError::Transport {
            action,
            message: format!("request not sent: {}", source_chain(err)),
        },
        _ => AwsError::Transport {
            action,
            message: source_chain(err),
        },
    }
}

/// An error and its causes on one line.
fn source_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        out.push_str(": ");
        out.push_str(&e.to_string());
        next = e.source();
    }
    out
}

/// Runs one AWS call, `op` building and sending the request afresh per
/// attempt, retrying throttling and transient failures (see the module
/// documentation). `action` is the IAM action the call needs.
pub async fn call<T, E, F, Fut>(
    retry: &RetrySettings,
    action: &'static str,
    mut op: F,
) -> Result<T, AwsError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
{
    if let Some(left) = retry.cooldowns.left(action) {
        tracing::debug!(
            action,
            left_ms = left.as_millis() as u64,
            "cooling down after throttling; not sent"
        );
        return Err(AwsError::Throttled {
            action,
            attempts: 0,
        });
    }
    let max = retry.max_attempts.max(1);
    let mut attempt = 0;
    let mut reloaded = false;
    loop {
        attempt += 1;
        let err = match op().await {
            Ok(v) => {
                retry.cooldowns.answered(action);
                return Ok(v);
            }
            Err(e) => e,
        };
        let class = match &err {
            SdkError::ServiceError(_) | SdkError::ResponseError(_) => {
                classify_code(err.code(), err.raw_response().map(|r| r.status().as_u16()))
            }
            SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => Class::Transient,
            _ => Class::Final,
        };
        if class != Class::Throttled {
            retry.cooldowns.answered(action);
        }
        if class == Class::Expired && !reloaded {
            // Once per call: credentials loaded again and refused again
            // are not expired but wrong.
            reloaded = true;
            tracing::warn!(
                action,
                code = err.code(),
                "the session token expired; loading the credentials again"
            );
            super::credentials::expire();
            continue;
        }
        if matches!(class, Class::Final | Class::Expired) || attempt >= max {
            if class == Class::Throttled {
                let cooldown = retry.cooldowns.throttled(action);
                tracing::warn!(
                    action,
                    attempts = attempt,
                    cooldown_s = cooldown.as_secs_f64(),
                    "throttled; giving up, and cooling down"
                );
                return Err(AwsError::Throttled {
                    action,
                    attempts: attempt,
                });
            }
            return Err(convert(action, &err));
        }
        let wait = retry.backoff(attempt);
        tracing::debug!(
            action,
            attempt,
            wait_ms = wait.as_millis() as u64,
            throttled = class == Class::Throttled,
            "retrying"
        );
        tokio::time::sleep(wait).await;
        // Another call of the action gave up meanwhile: this one stops
        // too, rather than keep a throttled account busy.
        if class == Class::Throttled && retry.cooldowns.left(action).is_some() {
            return Err(AwsError::Throttled {
                action,
                attempts: attempt,
            });
        }
    }
}

/// Every item of a paginated operation: `op` sends the request for a page
/// (given the previous page's token), `take` splits a page into its items
/// and the next token. Each page goes through [`call`].
pub async fn paginate<P, T, E, F, Fut>(
    retry: &RetrySettings,
    action: &'static str,
    mut op: F,
    mut take: impl FnMut(P) -> (Vec<T>, Option<String>),
) -> Result<Vec<T>, AwsError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<P, SdkError<E, HttpResponse>>>,
{
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = call(retry, action, || op(token.clone())).await?;
        let (items, next) = take(page);
        out.extend(items);
        match next {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => return Ok(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_jittered_below_a_doubling_capped_ceiling() {
        let r = RetrySettings {
            max_attempts: 10,
            base: Duration::from_millis(100),
            cap: Duration::from_millis(1000),
            cooldowns: Cooldowns::default(),
        };
        for _ in 0..200 {
            assert!(r.backoff(1) < Duration::from_millis(100));
            assert!(r.backoff(3) < Duration::from_millis(400));
            assert!(r.backoff(9) < Duration::from_millis(1000));
        }
        // Jitter: the waits are not all the same.
        let waits: std::collections::BTreeSet<Duration> = (0..50).map(|_| r.backoff(4)).collect();
        assert!(waits.len() > 10, "{waits:?}");
        let none = RetrySettings {
            base: Duration::ZERO,
            ..r
        };
        assert_eq!(none.backoff(3), Duration::ZERO);
    }

    #[test]
    fn an_action_throttled_through_a_call_cools_down_longer_each_time_in_a_row() {
        let c = Cooldowns::default();
        assert_eq!(c.left("ec2:CreateFleet"), None);
        let waits: Vec<Duration> = (0..6).map(|_| c.throttled("ec2:CreateFleet")).collect();
        assert_eq!(
            waits,
            [2, 4, 8, 16, 30, 30].map(Duration::from_secs),
            "from COOLDOWN_BASE, doubling, up to COOLDOWN_CAP"
        );
        let left = c.left("ec2:CreateFleet").expect("cooling down");
        assert!(
            left > Duration::from_secs(29) && left <= COOLDOWN_CAP,
            "{left:?}"
        );
        // Per action; an answer ends it.
        assert_eq!(c.left("ec2:TerminateInstances"), None);
        c.answered("ec2:CreateFleet");
        assert_eq!(c.left("ec2:CreateFleet"), None);
        assert_eq!(c.throttled("ec2:CreateFleet"), COOLDOWN_BASE);
        // Shared by the settings' clones (one provider's calls).
        let settings = RetrySettings::default();
        let clone = settings.clone();
        settings.cooldowns.throttled("ec2:DescribeInstances");
        assert!(clone.cooldowns.left("ec2:DescribeInstances").is_some());
        assert_eq!(settings, clone);
        assert_ne!(settings, RetrySettings::default());
    }

    #[test]
    fn codes_are_classified() {
        assert_eq!(
            classify_code(Some("RequestLimitExceeded"), Some(503)),
            Class::Throttled
        );
        assert_eq!(
            classify_code(Some("ThrottlingException"), Some(400)),
            Class::Throttled
        );
        assert_eq!(classify_code(None, Some(429)), Class::Throttled);
        assert_eq!(
            classify_code(Some("InternalError"), Some(500)),
            Class::Transient
        );
        assert_eq!(classify_code(None, Some(502)), Class::Transient);
        assert_eq!(
            classify_code(Some("InvalidInstanceID.NotFound"), Some(400)),
            Class::Final
        );
        assert_eq!(
            classify_code(Some("UnauthorizedOperation"), Some(403)),
            Class::Final
        );
    }

    #[test]
    fn errors_become_typed_cloud_errors() {
        let denied = AwsError::AccessDenied {
            action: "ec2:CreateFleet",
            code: "UnauthorizedOperation".into(),
            message: "You are not authorized to perform this operation.".into(),
        };
        let msg = denied.to_string();
        assert!(msg.contains("must allow ec2:CreateFleet"), "{msg}");
        assert_eq!(
            CloudError::from(denied),
            CloudError::AccessDenied {
                action: "ec2:CreateFleet".into(),
                message: "UnauthorizedOperation: You are not authorized to perform this operation."
                    .into(),
            }
        );
        let throttled = AwsError::Throttled {
            action: "ec2:DescribeInstances",
            attempts: 6,
        };
        assert_eq!(CloudError::from(throttled).metric_label(), "throttled");
    }
}
