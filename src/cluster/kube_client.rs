//! The kube client every dovetail command builds: kube's stack, with its
//! retry layer replaced by one that decides per request, and a deadline on
//! every call.
//!
//! kube 5's default client retries every 429, 503 and 504 up to 15 times
//! with exponential backoff (and `Retry-After`). For a controller that is
//! wrong in two ways:
//!
//! - **A refused eviction is an answer, not a fault.** The eviction
//!   subresource answers 429 when a PodDisruptionBudget allows no
//!   disruption; retried for minutes inside a pass, it holds provisioning,
//!   other drains, disruption and interruption behind it. An eviction's
//!   429 goes back to the caller at once (the drain asks again on its next
//!   pass, as Karpenter's eviction queue requeues).
//! - **A 504 is not a failure to apply.** The API server answers 504 when
//!   it gave up waiting, "but may still be processing the request": a
//!   create sent again may create twice (`generateName`) or fail with
//!   `AlreadyExists`. Only requests that are safe to repeat (GET, PUT with
//!   a resourceVersion, DELETE, PATCH) are retried on 504; a POST is not.
//!
//! What is retried (429s other than evictions' and 503s for every request)
//! waits for the server's `Retry-After` (at most [`MAX_RETRY_AFTER`]) or a
//! doubling backoff, at most [`MAX_RETRIES`] times. Every call but a watch
//! has a deadline of [`API_CALL_TIMEOUT`], retries included, so no call
//! holds a pass for longer; watches are bounded by their `timeoutSeconds`
//! and the watcher's own backoff.
//!
//! The user agent is `dovetail/<version>`, followed by the replica's identity
//! for `dovetail controller`, so the API server's audit log names the replica.

use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Method, Request, Response, StatusCode};
use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use tower::buffer::Buffer;
use tower::{BoxError, Layer, Service, ServiceExt};

/// The longest any API call but a watch may take, retries included.
pub const API_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How many times a request is sent again after a retryable answer.
pub const MAX_RETRIES: u32 = 5;
/// The longest `Retry-After` waited for; a longer one is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);
/// The first backoff without `Retry-After`; it doubles up to
/// [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Installs rustls' aws-lc-rs crypto provider for the process. Both
/// providers are in the tree (kube's ring, the AWS SDK's aws-lc-rs) and
/// rustls panics when it must guess; every command and every client built
/// here calls this first.
pub fn install_tls_provider() {
    // Err only if a provider is installed already, which is as good.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// The client from `kubeconfig` (its current context) when given, else as
/// kube infers it (in-cluster, `KUBECONFIG`, `~/.kube/config`).
/// `user_agent` names this process to the API server (its audit log).
pub async fn connect(
    kubeconfig: Option<&Path>,
    user_agent: Option<&str>,
) -> Result<Client, kube::Error> {
    build(load_config(kubeconfig).await?, user_agent)
}

/// The configuration [`connect`] builds its client from (the controller
/// also reads the certificate authority nodes are to trust from it).
pub async fn load_config(kubeconfig: Option<&Path>) -> Result<Config, kube::Error> {
    Ok(match kubeconfig {
        None => Config::infer().await.map_err(kube::Error::InferConfig)?,
        Some(path) => {
            let file =
                kube::config::Kubeconfig::read_from(path).map_err(kube::Error::InferKubeconfig)?;
            Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(kube::Error::InferKubeconfig)?
        }
    })
}

/// The client of `config` with dovetail's request policy (see the module
/// documentation). Must be called inside a tokio runtime.
pub fn build(mut config: Config, user_agent: Option<&str>) -> Result<Client, kube::Error> {
    install_tls_provider();
    config.default_retry = false;
    let agent = match user_agent {
        Some(a) => format!("dovetail/{} ({a})", env!("CARGO_PKG_VERSION")),
        None => format!("dovetail/{}", env!("CARGO_PKG_VERSION")),
    };
    if let Ok(value) = HeaderValue::from_str(&agent) {
        config.headers.push((http::header::USER_AGENT, value));
    }
    let builder = ClientBuilder::try_from(config)?;
    Ok(builder.with_layer(&PolicyLayer).build())
}

/// The layer of [`Policy`]: buffers the inner service (so requests can be
/// sent again) and wraps it.
#[derive(Debug, Clone, Copy)]
pub struct PolicyLayer;

type Inner<S> = Buffer<Request<Body>, <S as Service<Request<Body>>>::Future>;

impl<S> Layer<S> for PolicyLayer
where
    S: Service<Request<Body>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send + Sync,
{
    type Service = Policy<Inner<S>>;

    fn layer(&self, inner: S) -> Self::Service {
        Policy {
            inner: Buffer::new(inner, 1024),
        }
    }
}

/// Retries and deadlines per request (see the module documentation).
#[derive(Clone)]
pub struct Policy<S> {
    inner: S,
}

/// What kind of request a policy decides for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestClass {
    /// A watch: no deadline (bounded by `timeoutSeconds`), never retried.
    Watch,
    /// `POST .../pods/NAME/eviction`: a 429 is the budget's answer.
    Eviction,
    /// Any other POST: not repeated after a 504.
    Create,
    /// GET, PUT, PATCH, DELETE: safe to repeat.
    Idempotent,
}

impl RequestClass {
    pub fn of<B>(req: &Request<B>) -> RequestClass {
        let watch = req.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
        });
        if watch {
            RequestClass::Watch
        } else if req.method() == Method::POST {
            if req.uri().path().ends_with("/eviction") {
                RequestClass::Eviction
            } else {
                RequestClass::Create
            }
        } else {
            RequestClass::Idempotent
        }
    }

    /// How long to wait before sending the request again after `status`
    /// (with the server's `Retry-After`, in seconds), on its `attempt`th
    /// retry; `None` when the answer goes back to the caller.
    pub fn retry_after(
        self,
        status: StatusCode,
        retry_after: Option<u64>,
        attempt: u32,
    ) -> Option<Duration> {
        if attempt >= MAX_RETRIES {
            return None;
        }
        let retry = match status {
            StatusCode::TOO_MANY_REQUESTS => {
                !matches!(self, RequestClass::Eviction | RequestClass::Watch)
            }
            StatusCode::SERVICE_UNAVAILABLE => self != RequestClass::Watch,
            StatusCode::GATEWAY_TIMEOUT => self == RequestClass::Idempotent,
            _ => false,
        };
        if !retry {
            return None;
        }
        Some(match retry_after {
            Some(s) => Duration::from_secs(s).min(MAX_RETRY_AFTER),
            None => MIN_BACKOFF
                .saturating_mul(1 << attempt.min(16))
                .min(MAX_BACKOFF),
        })
    }
}

/// The request sent again: kube's bodies are whole buffers, except
/// streamed ones, which are not retried.
fn clone_request(req: &Request<Body>) -> Option<Request<Body>> {
    let body = req.body().try_clone()?;
    let mut copy = Request::builder()
        .method(req.method().clone())
        .uri(req.uri().clone())
        .version(req.version())
        .body(body)
        .ok()?;
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    Some(copy)
}

/// A call that passed [`API_CALL_TIMEOUT`].
#[derive(Debug, thiserror::Error)]
#[error("the API call {method} {path} timed out after {}s", .after.as_secs())]
pub struct TimedOut {
    pub method: Method,
    pub path: String,
    pub after: Duration,
}

impl<S, B> Service<Request<Body>> for Policy<S>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        // The service that was polled ready takes the first attempt.
        let ready = self.inner.clone();
        let first = std::mem::replace(&mut self.inner, ready);
        let again = self.inner.clone();
        let class = RequestClass::of(&req);
        let (method, path) = (req.method().clone(), req.uri().path().to_string());
        let work = async move {
            let mut attempt = 0;
            let mut copy = (class != RequestClass::Watch)
                .then(|| clone_request(&req))
                .flatten();
            let mut response = { first }.call(req).await?;
            loop {
                let retry_after = response
                    .headers()
                    .get(http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok());
                let Some(wait) = class.retry_after(response.status(), retry_after, attempt) else {
                    return Ok(response);
                };
                let Some(req) = copy.take() else {
                    return Ok(response);
                };
                copy = clone_request(&req);
                tracing::debug!(status = %response.status(), ?wait, attempt, path = %req.uri().path(), "retrying an API request");
                drop(response);
                tokio::time::sleep(wait).await;
                attempt += 1;
                response = again.clone().oneshot(req).await?;
            }
        };
        Box::pin(async move {
            if class == RequestClass::Watch {
                return work.await;
            }
            match tokio::time::timeout(API_CALL_TIMEOUT, work).await {
                Ok(r) => r,
                Err(_) => Err(Box::new(TimedOut {
                    method,
                    path,
                    after: API_CALL_TIMEOUT,
                }) as BoxError),
            }
        })
    }
}

/// Whether the API server serves `plural` in `group_version` (discovery,
/// which every authenticated user may read): a kind whose CRD is not
/// installed cannot be watched.
pub async fn serves(client: &Client, group_version: &str, plural: &str) -> bool {
    client
        .list_api_group_resources(group_version)
        .await
        .is_ok_and(|list| list.resources.iter().any(|r| r.name == plural))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: Method, uri: &str) -> Request<()> {
        Request::builder().method(method).uri(uri).body(()).unwrap()
    }

    #[test]
    fn requests_are_classified_by_method_path_and_watch() {
        let class = |m, u| RequestClass::of(&req(m, u));
        assert_eq!(
            class(Method::POST, "/api/v1/namespaces/a/pods/p/eviction"),
            RequestClass::Eviction
        );
        assert_eq!(
            class(Method::POST, "/apis/karpenter.sh/v1/nodeclaims"),
            RequestClass::Create
        );
        assert_eq!(
            class(Method::GET, "/api/v1/pods?watch=true&resourceVersion=5"),
            RequestClass::Watch
        );
        assert_eq!(
            class(Method::GET, "/api/v1/pods?limit=500"),
            RequestClass::Idempotent
        );
        assert_eq!(
            class(Method::PUT, "/apis/karpenter.sh/v1/nodeclaims/a/status"),
            RequestClass::Idempotent
        );
    }

    #[test]
    fn an_evictions_429_is_an_answer_and_a_creates_504_is_not_repeated() {
        let s = |c: u16| StatusCode::from_u16(c).unwrap();
        assert_eq!(RequestClass::Eviction.retry_after(s(429), None, 0), None);
        assert_eq!(RequestClass::Eviction.retry_after(s(429), Some(1), 0), None);
        assert!(
            RequestClass::Eviction
                .retry_after(s(503), None, 0)
                .is_some()
        );
        assert_eq!(RequestClass::Create.retry_after(s(504), None, 0), None);
        assert!(RequestClass::Create.retry_after(s(429), None, 0).is_some());
        assert!(
            RequestClass::Idempotent
                .retry_after(s(504), None, 0)
                .is_some()
        );
        assert_eq!(RequestClass::Watch.retry_after(s(503), None, 0), None);
        for code in [200, 400, 404, 409, 422, 500] {
            assert_eq!(RequestClass::Idempotent.retry_after(s(code), None, 0), None);
        }
    }

    #[test]
    fn retries_wait_for_retry_after_within_a_cap_or_back_off_and_stop() {
        let s = StatusCode::TOO_MANY_REQUESTS;
        let c = RequestClass::Idempotent;
        assert_eq!(c.retry_after(s, Some(2), 0), Some(Duration::from_secs(2)));
        assert_eq!(c.retry_after(s, Some(3600), 0), Some(MAX_RETRY_AFTER));
        assert_eq!(c.retry_after(s, None, 0), Some(MIN_BACKOFF));
        assert_eq!(c.retry_after(s, None, 1), Some(MIN_BACKOFF * 2));
        assert_eq!(
            c.retry_after(s, None, 4),
            Some(MAX_BACKOFF.min(MIN_BACKOFF * 16))
        );
        assert_eq!(c.retry_after(s, None, MAX_RETRIES), None);
        // The worst case still fits the call's deadline.
        let worst: Duration = (0..MAX_RETRIES)
            .map(|a| c.retry_after(s, None, a).unwrap())
            .sum();
        assert!(worst < API_CALL_TIMEOUT, "{worst:?}");
    }
}
