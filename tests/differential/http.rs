//! Plain HTTP requests to an API server through kube's client (the
//! testbed's admin client certificate, or no authentication for the served
//! API), answered as status, headers and body.

use std::path::Path;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use serde_json::Value;

/// A client of one API server, with the runtime that drives it.
pub struct Api {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
}

/// One response.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON; `Null` if it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Api {
    /// A client for the cluster and user of a kubeconfig file.
    pub fn from_kubeconfig(path: &Path) -> Api {
        dovetail::cluster::kube_client::install_tls_provider();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let client = rt.block_on(async {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let mut config = kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                config
                    .cluster_url
                    .host()
                    .is_some_and(|h| h == "127.0.0.1" || h == "localhost"),
                "only 127.0.0.1 is ever contacted: {}",
                config.cluster_url
            );
            // Each answer as the server gives it: kube's default layer
            // retries a 429 (such as an eviction a budget refuses) with
            // backoff for minutes.
            config.default_retry = false;
            kube::Client::try_from(config).expect("a client")
        });
        Api { rt, client }
    }

    /// One request; `body` is sent with `content_type`.
    pub fn send(&self, method: &str, path: &str, content_type: &str, body: Option<&[u8]>) -> Reply {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::CONTENT_TYPE, content_type)
            .body(kube::client::Body::from(body.unwrap_or_default().to_vec()))
            .expect("a request");
        self.rt.block_on(async {
            let response = tokio::time::timeout(Duration::from_secs(60), self.client.send(request))
                .await
                .unwrap_or_else(|_| panic!("{method} {path}: no answer within 60 s"))
                .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .unwrap_or_else(|e| panic!("{method} {path}: reading the body: {e}"))
                .to_bytes()
                .to_vec();
            Reply {
                status: parts.status.as_u16(),
                body,
            }
        })
    }

    pub fn get(&self, path: &str) -> Reply {
        self.send("GET", path, "application/json", None)
    }

    /// A JSON body.
    pub fn json(&self, method: &str, path: &str, body: &Value) -> Reply {
        self.send(
            method,
            path,
            "application/json",
            Some(body.to_string().as_bytes()),
        )
    }

    /// A watch: the events it sends until `done` holds for the events so
    /// far, or `within` passes (then the events so far), or the server
    /// ends it. The status of a watch the server refuses is an `ERROR`
    /// event of its body, as a client would read it.
    pub fn watch(
        &self,
        path: &str,
        within: Duration,
        done: impl Fn(&[Value]) -> bool,
    ) -> (u16, Vec<Value>) {
        let request = http::Request::builder()
            .method("GET")
            .uri(path)
            .header(http::header::ACCEPT, "application/json")
            .body(kube::client::Body::empty())
            .expect("a request");
        self.rt.block_on(async {
            let deadline = Instant::now() + within;
            let response = self
                .client
                .send(request)
                .await
                .unwrap_or_else(|e| panic!("GET {path}: {e}"));
            let status = response.status().as_u16();
            let mut body = response.into_body();
            let mut buffer = Vec::new();
            let mut events = Vec::new();
            if status != 200 {
                let bytes = body.collect().await.map(|b| b.to_bytes().to_vec());
                let v = serde_json::from_slice(&bytes.unwrap_or_default()).unwrap_or(Value::Null);
                return (status, vec![v]);
            }
            while !done(&events) {
                let left = deadline.saturating_duration_since(Instant::now());
                let frame = match tokio::time::timeout(left, body.frame()).await {
                    Err(_) | Ok(None) => break,
                    Ok(Some(Err(e))) => panic!("GET {path}: {e}"),
                    Ok(Some(Ok(frame))) => frame,
                };
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                buffer.extend_from_slice(&data);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                        events.push(v);
                    }
                }
            }
            (status, events)
        })
    }
}
