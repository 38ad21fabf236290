//! The controller's HTTP endpoints: `/metrics` (Prometheus text format),
//! `/healthz` and `/readyz`.
//!
//! A minimal HTTP/1.1 responder on tokio's TCP listener: each connection
//! sends one `GET` (or `HEAD`) request and gets one response, then is
//! closed. That is all Prometheus and the kubelet's probes need. It
//! predates hyper's `server` feature in the tree; now that `crate::world::serve`
//! builds on it, these three routes could move onto hyper too.
//!
//! `/readyz` answers once every cache is synced, while the replica leads or
//! stands by with a working election.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// The longest request head accepted.
const MAX_REQUEST: usize = 8 * 1024;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the leader's loop may go without finishing a pass before
/// `/healthz` fails, by default. A pass runs at least every resync
/// (60 s), and every API call in it has a deadline
/// ([`crate::cluster::kube_client::API_CALL_TIMEOUT`]), so a loop that
/// has not finished one for this long is wedged, and the kubelet restarts
/// it.
pub const LIVENESS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// What the probes report, shared by the runtime and the server.
#[derive(Debug)]
pub struct Health {
    /// Every cache has completed its initial list.
    pub synced: AtomicBool,
    /// This replica leads (or leader election is off and it runs).
    pub leading: AtomicBool,
    /// This replica stands by and its election rounds reach the server.
    pub standby_healthy: AtomicBool,
    /// The controller loop has stopped (a fatal error): not alive.
    pub stopped: AtomicBool,
    /// How long the leader's loop may go without finishing a pass.
    pub liveness_timeout: Duration,
    /// The leader's loop: when it last made progress (started leading or
    /// finished a pass), and since when a pass has been running.
    progress: Mutex<Progress>,
}

#[derive(Debug, Default)]
struct Progress {
    last: Option<Instant>,
    running_since: Option<Instant>,
}

impl Default for Health {
    fn default() -> Self {
        Health::with_liveness_timeout(LIVENESS_TIMEOUT)
    }
}

impl Health {
    pub fn with_liveness_timeout(liveness_timeout: Duration) -> Self {
        Health {
            synced: AtomicBool::new(false),
            leading: AtomicBool::new(false),
            standby_healthy: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            liveness_timeout,
            progress: Mutex::new(Progress::default()),
        }
    }

    fn progress(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The loop made progress: a term started, or a pass finished.
    pub fn progressed(&self) {
        let mut p = self.progress();
        p.last = Some(Instant::now());
        p.running_since = None;
    }

    /// A pass starts (before it waits for the controller).
    pub fn pass_started(&self) {
        self.progress().running_since = Some(Instant::now());
    }

    /// `/readyz`: the caches are synced and the replica either leads or
    /// stands by healthily.
    pub fn ready(&self) -> Result<(), String> {
        if !self.synced.load(Ordering::Relaxed) {
            return Err("caches not synced".into());
        }
        if !self.leading.load(Ordering::Relaxed) && !self.standby_healthy.load(Ordering::Relaxed) {
            return Err(
                "neither leading nor standing by: leader election cannot reach the API server"
                    .into(),
            );
        }
        Ok(())
    }

    /// `/healthz`: the process serves, its loop has not stopped, and while
    /// it leads, no pass has run, and no pass has been missing, for longer
    /// than [`Health::liveness_timeout`]. A standby is alive: restarting it
    /// would not bring the API server back.
    pub fn alive(&self) -> Result<(), String> {
        if self.stopped.load(Ordering::Relaxed) {
            return Err("controller loop stopped".into());
        }
        if !self.leading.load(Ordering::Relaxed) {
            return Ok(());
        }
        let p = self.progress();
        let limit = self.liveness_timeout;
        if let Some(since) = p.running_since
            && since.elapsed() > limit
        {
            return Err(format!(
                "a controller pass has run for {}s (limit {}s)",
                since.elapsed().as_secs(),
                limit.as_secs()
            ));
        }
        if let Some(last) = p.last
            && p.running_since.is_none()
            && last.elapsed() > limit
        {
            return Err(format!(
                "no controller pass for {}s (limit {}s)",
                last.elapsed().as_secs(),
                limit.as_secs()
            ));
        }
        Ok(())
    }
}

/// What the endpoints serve.
pub struct Endpoints {
    pub health: Arc<Health>,
    /// The metrics in Prometheus text format, gathered at each scrape.
    pub metrics: Box<dyn Fn() -> String + Send + Sync>,
}

/// A response: status code, content type, body.
type Response = (u16, &'static str, String);

impl Endpoints {
    /// The response to a request line's method and target.
    pub fn respond(&self, method: &str, target: &str) -> Response {
        const TEXT: &str = "text/plain; charset=utf-8";
        if method != "GET" && method != "HEAD" {
            return (405, TEXT, "method not allowed\n".into());
        }
        let path = target.split('?').next().unwrap_or_default();
        let probe = |r: Result<(), String>| match r {
            Ok(()) => (200, TEXT, "ok\n".to_string()),
            Err(why) => (503, TEXT, format!("{why}\n")),
        };
        match path {
            "/metrics" => (
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                (self.metrics)(),
            ),
            "/healthz" | "/livez" => probe(self.health.alive()),
            "/readyz" => probe(self.health.ready()),
            _ => (404, TEXT, "not found\n".into()),
        }
    }
}

/// Serves connections on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    endpoints: Arc<Endpoints>,
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let endpoints = endpoints.clone();
                    tokio::spawn(async move {
                        if let Err(error) = handle(stream, &endpoints).await {
                            tracing::debug!(%error, "HTTP connection failed");
                        }
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

async fn handle(mut stream: TcpStream, endpoints: &Endpoints) -> std::io::Result<()> {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(r) => r?,
        Err(_) => return Ok(()),
    };
    let (status, content_type, body, head_only) = match parse_request_line(&head) {
        Some((method, target)) => {
            let (s, c, b) = endpoints.respond(method, target);
            (s, c, b, method == "HEAD")
        }
        None => (
            400,
            "text/plain; charset=utf-8",
            "bad request\n".to_string(),
            false,
        ),
    };
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&out).await?;
    stream.shutdown().await
}

/// Reads up to the end of the request head (`\r\n\r\n`), at most
/// [`MAX_REQUEST`] bytes.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// The method and target of `METHOD TARGET HTTP/1.x`.
fn parse_request_line(head: &str) -> Option<(&str, &str)> {
    let line = head.lines().next()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return None;
    }
    Some((method, target))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints() -> Arc<Endpoints> {
        Arc::new(Endpoints {
            health: Arc::new(Health::default()),
            metrics: Box::new(|| "karpenter_nodes_created_total{nodepool=\"a\"} 1\n".to_string()),
        })
    }

    async fn get(addr: std::net::SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn probes_follow_the_health_and_metrics_are_served_as_text() {
        let e = endpoints();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, e.clone(), async {
            let _ = stopped.await;
        }));
        let req = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");

        let r = get(addr, &req("/readyz")).await;
        assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
        assert!(r.ends_with("caches not synced\n"), "{r}");
        e.health.synced.store(true, Ordering::Relaxed);
        let r = get(addr, &req("/readyz")).await;
        assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
        e.health.standby_healthy.store(true, Ordering::Relaxed);
        assert!(
            get(addr, &req("/readyz"))
                .await
                .starts_with("HTTP/1.1 200 ")
        );
        e.health.standby_healthy.store(false, Ordering::Relaxed);
        e.health.leading.store(true, Ordering::Relaxed);
        assert!(
            get(addr, &req("/readyz?verbose"))
                .await
                .starts_with("HTTP/1.1 200 ")
        );

        assert!(
            get(addr, &req("/healthz"))
                .await
                .starts_with("HTTP/1.1 200 ")
        );
        e.health.stopped.store(true, Ordering::Relaxed);
        assert!(
            get(addr, &req("/healthz"))
                .await
                .starts_with("HTTP/1.1 503 ")
        );

        let r = get(addr, &req("/metrics")).await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
        assert!(
            r.ends_with("\r\n\r\nkarpenter_nodes_created_total{nodepool=\"a\"} 1\n"),
            "{r}"
        );
        let r = get(addr, "HEAD /metrics HTTP/1.1\r\n\r\n").await;
        assert!(r.ends_with("\r\n\r\n"), "{r}");

        assert!(get(addr, &req("/nope")).await.starts_with("HTTP/1.1 404 "));
        assert!(
            get(addr, "POST /metrics HTTP/1.1\r\n\r\n")
                .await
                .starts_with("HTTP/1.1 405 ")
        );
        assert!(
            get(addr, "garbage\r\n\r\n")
                .await
                .starts_with("HTTP/1.1 400 ")
        );
        stop.send(()).unwrap();
        server.await.unwrap();
    }

    #[test]
    fn request_lines_are_parsed_strictly() {
        assert_eq!(
            parse_request_line("GET /metrics HTTP/1.1\r\n"),
            Some(("GET", "/metrics"))
        );
        assert_eq!(parse_request_line("GET /metrics\r\n"), None);
        assert_eq!(parse_request_line("GET metrics HTTP/1.1\r\n"), None);
        assert_eq!(parse_request_line("GET / HTTP/2 extra\r\n"), None);
        assert_eq!(parse_request_line(""), None);
    }
}
