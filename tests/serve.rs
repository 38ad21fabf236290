//! `dovetail simulate --serve` through independent, real clients: kubectl
//! (skipped with a message where it is not installed) and the production
//! `dovetail controller` binary with moto as EC2.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::root;

/// A `dovetail simulate --serve` process on 127.0.0.1 and a free port.
pub(crate) struct Served {
    child: Child,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

impl Served {
    /// Serves `scenario` with the extra flags and environment; returns once
    /// the API answers.
    pub fn start(scenario: &Path, extra: &[&str], env: &[(&str, String)]) -> Served {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dovetail"));
        cmd.arg("simulate")
            .arg(scenario)
            .args(["--serve", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .args(["-o", "json", "--output-file"])
            .arg(dir.path().join("report.json"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("serve.log")).expect("log"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("dovetail simulate --serve starts");
        let served = Served {
            child,
            dir,
            kubeconfig,
        };
        served.wait_for("the served API", Duration::from_secs(60), || {
            served.kubeconfig.exists()
                && served
                    .kubectl(&["get", "--raw", "/version"])
                    .status
                    .success()
        });
        served
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    /// Runs kubectl against the served API, with its own discovery cache.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_command(args).output().expect("kubectl runs")
    }

    pub fn kubectl_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("kube-cache"))
            .args(args);
        cmd
    }

    /// kubectl's stdout, failing the test with its stderr if it fails.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A GET with the given Accept header, by hand: the status code, the
    /// Content-Type and the body.
    pub fn raw_get(&self, path: &str, accept: &str) -> (u16, String, Vec<u8>) {
        use std::io::Write;
        let kubeconfig = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        let address = kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: http://"))
            .expect("a served address");
        let mut stream = std::net::TcpStream::connect(address).expect("connect");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {address}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
        )
        .expect("request");
        let mut response = Vec::new();
        stream.read_to_end(&mut response).expect("response");
        let split = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("headers end");
        let head = String::from_utf8_lossy(&response[..split]).into_owned();
        let code = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("status");
        let content_type = head
            .lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(k, _)| k.eq_ignore_ascii_case("content-type"))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default();
        (code, content_type, response[split + 4..].to_vec())
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl_ok(&a)).expect("kubectl -o json")
    }

    pub fn wait_for(&self, what: &str, within: Duration, mut ready: impl FnMut() -> bool) {
        let start = Instant::now();
        while !ready() {
            assert!(
                start.elapsed() < within,
                "{what} not within {within:?}\nserver log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Names of pods in `shop` that run and are ready.
    pub fn ready_pods(&self) -> Vec<String> {
        let pods = self.json(&["get", "pods", "-n", "shop"]);
        pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter(|p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
            .collect()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kubectl_installed() -> bool {
    let found = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        crate::missing(
            "kubectl is not installed (.ci/run puts the testbed's on PATH, or any kubectl binary)",
        );
    }
    found
}

fn scenario() -> PathBuf {
    root().join("tests/scenarios/serve/kubectl.yaml")
}

fn lines(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|l: &Vec<&str>| !l.is_empty())
        .collect()
}

/// `kubectl get` prints what it prints against a real API server: the
/// columns of the built-in printers and of the CRDs' printer columns, and
/// `--watch` follows changes; `kubectl apply --server-side` applies the
/// example repository.
#[test]
fn kubectl_gets_watches_and_applies_as_against_an_api_server() {
    if !kubectl_installed() {
        return;
    }
    let s = Served::start(&scenario(), &[], &[]);
    s.wait_for("two ready web pods", Duration::from_secs(60), || {
        s.ready_pods().len() == 2
    });
    let out = s.kubectl_ok(&["get", "nodes,pods,nodepools,nodeclaims", "-A"]);
    let rows = lines(&out);
    // kubectl adds a NAMESPACE column to the sections after the first.
    let header = |cols: &[&str]| {
        rows.iter()
            .any(|r| r.ends_with(cols) && r.len() <= cols.len() + 1)
    };
    for cols in [
        &["NAME", "STATUS", "ROLES", "AGE", "VERSION"][..],
        &["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        &["NAME", "NODECLASS", "NODES", "READY", "AGE"],
        &["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"],
    ] {
        assert!(header(cols), "{cols:?} in {out}");
    }
    let nodes: Vec<&Vec<&str>> = rows.iter().filter(|r| r[0].starts_with("node/")).collect();
    assert_eq!(nodes.len(), 2, "{out}");
    for n in &nodes {
        assert_eq!(n[1..3], ["Ready", "<none>"], "{out}");
        assert!(n.get(4).is_some_and(|v| v.starts_with("v1.33.")), "{out}");
    }
    let pods: Vec<&Vec<&str>> = rows
        .iter()
        .filter(|r| r.get(1).is_some_and(|n| n.starts_with("pod/web-")))
        .collect();
    assert_eq!(pods.len(), 2, "{out}");
    for p in &pods {
        assert_eq!(p[0], "shop");
        assert_eq!(p[2..5], ["1/1", "Running", "0"], "{out}");
    }
    let claims: Vec<&Vec<&str>> = rows
        .iter()
        .filter(|r| r[0].starts_with("nodeclaim.karpenter.sh/"))
        .collect();
    assert_eq!(claims.len(), 2, "{out}");
    for c in &claims {
        assert!(["m5.large", "m5.xlarge"].contains(&c[1]), "{out}");
        assert_eq!(c[2], "on-demand");
        assert!(c[4].starts_with("ip-"), "{out}");
        assert_eq!(c[5], "True", "{out}");
    }
    // --watch: the rows, then a row per change.
    let mut watch = s
        .kubectl_command(&["get", "pods", "-n", "shop", "--watch", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get --watch");
    std::thread::sleep(Duration::from_secs(2));
    s.kubectl_ok(&["scale", "deployment/web", "-n", "shop", "--replicas=3"]);
    s.wait_for("a third ready web pod", Duration::from_secs(60), || {
        s.ready_pods().len() == 3
    });
    std::thread::sleep(Duration::from_secs(1));
    let _ = watch.kill();
    let mut watched = String::new();
    watch
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut watched)
        .expect("watch output");
    let _ = watch.wait();
    let names: std::collections::BTreeSet<&str> = watched.lines().collect();
    assert_eq!(
        names.len(),
        3,
        "the two pods listed, then the third one watched: {watched}"
    );
    assert!(
        watched.lines().count() > 3,
        "the third pod changes (bound, running) are watched too: {watched}"
    );
    // Server-side apply of the example repository.
    let examples = root().join("examples-repo");
    let applied = s.kubectl_ok(&[
        "apply",
        "--server-side",
        "-f",
        &examples.join("nodeclasses").to_string_lossy(),
        "-f",
        &examples.join("nodepools").to_string_lossy(),
    ]);
    assert_eq!(
        applied.lines().collect::<Vec<_>>(),
        [
            "ec2nodeclass.karpenter.k8s.aws/default serverside-applied",
            "ec2nodeclass.karpenter.k8s.aws/gpu serverside-applied",
            "nodepool.karpenter.sh/arm64 serverside-applied",
            "nodepool.karpenter.sh/batch serverside-applied",
            "nodepool.karpenter.sh/general serverside-applied",
            "nodepool.karpenter.sh/gpu serverside-applied",
        ]
    );
    let pool = s.json(&["get", "nodepool", "general", "--show-managed-fields"]);
    assert_eq!(pool["metadata"]["managedFields"][0]["manager"], "kubectl");
    // An undeclared field is refused: kubectl asks for strict validation.
    let bad = s.dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: bad}\nspec:\n  colour: blue\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
    )
    .expect("write");
    let refused = s.kubectl(&["apply", "--server-side", "-f", &bad.to_string_lossy()]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("strict decoding error: unknown field \"spec.colour\""),
        "{err}"
    );
}

/// `kubectl drain` of a node whose pod a PodDisruptionBudget protects:
/// the eviction is refused (429) and retried until the budget allows it,
/// then the node is drained; `kubectl delete` of a NodeClaim waits for its
/// finalizer.
#[test]
fn kubectl_drains_under_a_budget_and_deletes_through_finalizers() {
    if !kubectl_installed() {
        return;
    }
    let s = Served::start(&scenario(), &[], &[]);
    s.wait_for("two ready web pods", Duration::from_secs(60), || {
        s.ready_pods().len() == 2
    });
    let pods = s.json(&["get", "pods", "-n", "shop"]);
    let node = pods["items"][0]["spec"]["nodeName"]
        .as_str()
        .expect("bound")
        .to_string();
    let out_path = s.dir.path().join("drain.out");
    let err_path = s.dir.path().join("drain.err");
    let mut drain = s
        .kubectl_command(&["drain", &node, "--ignore-daemonsets", "--timeout=120s"])
        .stdout(std::fs::File::create(&out_path).expect("out"))
        .stderr(std::fs::File::create(&err_path).expect("err"))
        .spawn()
        .expect("kubectl drain");
    s.wait_for("the budget's refusal", Duration::from_secs(30), || {
        std::fs::read_to_string(&err_path)
            .unwrap_or_default()
            .contains("Cannot evict pod as it would violate the pod's disruption budget.")
    });
    // A third replica, once ready, lets the budget allow one disruption.
    s.kubectl_ok(&["scale", "deployment/web", "-n", "shop", "--replicas=3"]);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = drain.try_wait().expect("drain") {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(150),
            "drain did not finish\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(status.success(), "drain failed: {out}\n{err}");
    assert!(out.contains(&format!("node/{node} cordoned")), "{out}");
    assert!(out.contains("evicting pod shop/web-"), "{out}");
    assert!(out.contains("evicted"), "{out}");
    assert!(out.contains(&format!("node/{node} drained")), "{out}");
    assert!(
        err.contains("(will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget."),
        "{err}"
    );
    let cordoned = s.json(&["get", "node", &node]);
    assert_eq!(cordoned["spec"]["unschedulable"], true);

    // A NodeClaim holds its termination finalizer until the controller
    // has drained and terminated it; kubectl waits for it to go.
    let claims = s.json(&["get", "nodeclaims"]);
    let claim = claims["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|c| c["status"]["nodeName"] == node.as_str())
        .and_then(|c| c["metadata"]["name"].as_str())
        .expect("the drained node's NodeClaim")
        .to_string();
    let finalizers = s.json(&["get", "nodeclaim", &claim]);
    assert_eq!(
        finalizers["metadata"]["finalizers"][0],
        "karpenter.sh/termination"
    );
    let deleted = s.kubectl_ok(&["delete", "nodeclaim", &claim, "--timeout=90s"]);
    assert_eq!(
        deleted.trim(),
        format!("nodeclaim.karpenter.sh \"{claim}\" deleted")
    );
    let gone = s.kubectl(&["get", "nodeclaim", &claim]);
    assert!(!gone.status.success());
    assert_eq!(
        String::from_utf8_lossy(&gone.stderr).trim(),
        format!("Error from server (NotFound): nodeclaims.karpenter.sh \"{claim}\" not found")
    );
}

/// A `dovetail controller` process against the served API and moto.
struct ControllerProcess {
    identity: String,
    child: Child,
    log: PathBuf,
    /// The health endpoint's address.
    health: String,
}

impl ControllerProcess {
    fn start(s: &Served, env: &crate::aws::Env, moto: &crate::moto::Moto, identity: &str) -> Self {
        Self::start_with(s, env, moto, identity, &[])
    }

    fn start_with(
        s: &Served,
        env: &crate::aws::Env,
        moto: &crate::moto::Moto,
        identity: &str,
        extra: &[&str],
    ) -> Self {
        let port = |_: ()| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port()
                .to_string()
        };
        let log = s.dir.path().join(format!("controller-{identity}.log"));
        let health_port = port(());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dovetail"));
        cmd.arg("controller")
            .arg("--kubeconfig")
            .arg(&s.kubeconfig)
            .args([
                "--cluster-name",
                &env.cluster,
                "--endpoint-url",
                &moto.endpoint(),
            ])
            .args([
                "--region",
                &env.region,
                "--kubernetes-version",
                crate::aws::K8S,
            ])
            .args(["--ssm-parameter-root", &env.ssm_root, "--isolated-vpc"])
            .arg("--pricing-file")
            .arg(root().join("tests/fixtures/aws/prices.json"))
            .args(["--cluster-endpoint", "https://example.eks.amazonaws.com"])
            .args([
                "--cluster-ca-bundle",
                "Q0E=",
                "--service-cidr",
                "10.100.0.0/16",
            ])
            .args(["--identity", identity, "--namespace", "default"])
            .args(["--metrics-port", &port(()), "--health-port", &health_port])
            .args(extra)
            .envs(moto.sdk_env(&env.region))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"));
        ControllerProcess {
            identity: identity.to_string(),
            child: cmd.spawn().expect("dovetail controller starts"),
            log,
            health: format!("127.0.0.1:{health_port}"),
        }
    }

    /// `/healthz`'s status code, if it answers.
    fn healthz(&self) -> Option<u16> {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(&self.health).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        answer.split_whitespace().nth(1)?.parse().ok()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {signal} {}", self.child.id());
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Lease's holder, if any.
fn holder(s: &Served) -> Option<String> {
    let out = s.kubectl(&[
        "get",
        "lease",
        "dovetail-leader",
        "-n",
        "default",
        "-o",
        "json",
    ]);
    let lease: Value = serde_json::from_slice(&out.stdout).ok()?;
    lease["spec"]["holderIdentity"]
        .as_str()
        .filter(|h| !h.is_empty())
        .map(String::from)
}

/// Instance ids: of the NodeClaims, of the Nodes, and of moto's live
/// instances tagged for the cluster.
fn fleet(
    s: &Served,
    env: &crate::aws::Env,
    rt: &tokio::runtime::Runtime,
) -> [std::collections::BTreeSet<String>; 3] {
    let ids = |list: Value, pointer: &str| -> std::collections::BTreeSet<String> {
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| {
                o.pointer(pointer)?
                    .as_str()?
                    .rsplit('/')
                    .next()
                    .map(String::from)
            })
            .filter(|id| id.starts_with("i-"))
            .collect()
    };
    let claims = ids(s.json(&["get", "nodeclaims"]), "/status/providerID");
    let nodes = ids(s.json(&["get", "nodes"]), "/spec/providerID");
    let live = rt.block_on(async {
        let out = env
            .ec2
            .describe_instances()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name(format!("tag:kubernetes.io/cluster/{}", env.cluster))
                    .values("owned")
                    .build(),
            )
            .send()
            .await
            .expect("DescribeInstances");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter(|i| {
                !matches!(
                    i.state().and_then(|s| s.name()).map(|n| n.as_str()),
                    Some("terminated" | "shutting-down")
                )
            })
            .filter_map(|i| i.instance_id().map(String::from))
            .collect()
    });
    [claims, nodes, live]
}

/// moto and a runtime with moto's AWS environment for `cluster`, or
/// `None` where kubectl or moto is missing (the test then passes, having
/// said why).
fn with_moto(
    cluster: &str,
) -> Option<(
    &'static crate::moto::Moto,
    tokio::runtime::Runtime,
    crate::aws::Env,
)> {
    if !kubectl_installed() {
        return None;
    }
    let moto = crate::moto::server()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let env = rt.block_on(crate::aws::Env::new(&moto.endpoint(), "us-east-1", cluster));
    Some((moto, rt, env))
}

/// `simulate --serve --controller none` with moto as EC2: a repository
/// with an EC2NodeClass for `cluster` and the serve scenario's NodePool,
/// and a Deployment `shop/web` of `replicas` pods at 1 s.
fn served_with_moto(
    moto: &crate::moto::Moto,
    cluster: &str,
    work: &Path,
    replicas: usize,
    extra: &[&str],
) -> Served {
    let repo = work.join("repo");
    std::fs::create_dir_all(&repo).expect("repo");
    std::fs::write(
        repo.join("nodeclass.yaml"),
        format!(
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n  role: KarpenterNodeRole-{cluster}\n  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: {cluster}}}}}]\n  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: {cluster}}}}}]\n"
        ),
    )
    .expect("nodeclass");
    std::fs::copy(
        root().join("tests/scenarios/serve/repo/nodepool.yaml"),
        repo.join("nodepool.yaml"),
    )
    .expect("nodepool");
    let scenario = work.join("scenario.yaml");
    std::fs::write(
        &scenario,
        format!(
            "config: repo\ncloud: {{launchDelay: 2s, kubernetesVersion: \"{}\"}}\ntimeline:\n  - at: 1s\n    apply:\n      - apiVersion: apps/v1\n        kind: Deployment\n        metadata: {{name: web, namespace: shop}}\n        spec:\n          replicas: {replicas}\n          selector: {{matchLabels: {{app: web}}}}\n          template:\n            metadata: {{labels: {{app: web}}}}\n            spec:\n              terminationGracePeriodSeconds: 1\n              containers: [{{name: web, image: example/web:1, resources: {{requests: {{cpu: \"1\", memory: 1Gi}}}}}}]\nuntil: 30m\n",
            crate::aws::K8S
        ),
    )
    .expect("scenario");
    let endpoint = moto.endpoint();
    let mut args = vec![
        "--controller",
        "none",
        "--ec2-endpoint",
        &endpoint,
        "--cluster-name",
        cluster,
        "--region",
        "us-east-1",
    ];
    args.extend_from_slice(extra);
    Served::start(&scenario, &args, &moto.sdk_env("us-east-1"))
}

/// The served API's audit log: every write request, in order.
fn audited(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// kube 5's default client retries a 429 fifteen times with backoff, so a
/// PDB-blocked eviction held the controller's pass for minutes.
/// dovetail's client answers it at once, waits out a throttled create's
/// `Retry-After`, and never sends a create again after a 504.
#[test]
fn the_kube_client_answers_a_blocked_eviction_at_once_and_repeats_only_what_is_safe() {
    if !kubectl_installed() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.jsonl");
    let audit_arg = audit.to_string_lossy().into_owned();
    let s = Served::start(
        &scenario(),
        &[
            "--audit-log",
            &audit_arg,
            "--fault",
            "verb=create,resource=configmaps,status=429,retryAfter=1,times=2",
            "--fault",
            "verb=create,resource=serviceaccounts,status=504,times=1",
        ],
        &[],
    );
    s.wait_for("two ready web pods", Duration::from_secs(60), || {
        s.ready_pods().len() == 2
    });
    let pod = s.ready_pods()[0].clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        use dovetail::cluster::{Cluster, KubeCluster};
        use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
        let client = dovetail::cluster::kube_client::connect(Some(&s.kubeconfig), Some("test"))
            .await
            .expect("client");
        let cluster = KubeCluster::new(client);

        // The budget needs both pods: the eviction's 429 comes back at once.
        let started = Instant::now();
        let refused = cluster.evict("shop", &pod).await.unwrap_err();
        assert_eq!(refused.code(), 429, "{refused}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the eviction took {:?}",
            started.elapsed()
        );
        // kube's default stack is still retrying the same eviction 5 s on.
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&s.kubeconfig).expect("kubeconfig"),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("config");
        let default = kube::Client::try_from(config).expect("default client");
        let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(default, "shop");
        let slow = tokio::time::timeout(
            Duration::from_secs(5),
            pods.evict(&pod, &kube::api::EvictParams::default()),
        )
        .await;
        assert!(
            slow.is_err(),
            "kube's default retry layer answered: {slow:?}"
        );

        // Throttled twice with Retry-After: 1, then created.
        let started = Instant::now();
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "throttled", "namespace": "shop"}
        }))
        .expect("configmap");
        cluster
            .create(cm)
            .await
            .expect("created after the throttling");
        let waited = started.elapsed();
        assert!(
            (Duration::from_secs(2)..Duration::from_secs(10)).contains(&waited),
            "{waited:?}"
        );

        // A 504 on a create is the caller's to handle: sent once.
        let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "once", "namespace": "shop"}
        }))
        .expect("serviceaccount");
        let timed_out = cluster.create(sa.clone()).await.unwrap_err();
        assert!(timed_out.to_string().contains("504 Timeout"), "{timed_out}");
        cluster.create(sa).await.expect("created when sent again");
    });
    let writes = audited(&audit);
    let by_test = |resource: &str| {
        writes
            .iter()
            .filter(|w| w["resource"] == resource)
            .filter(|w| {
                w["userAgent"]
                    .as_str()
                    .is_some_and(|u| u.contains("(test)"))
            })
            .map(|w| w["code"].as_u64().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    assert_eq!(by_test("pods/eviction"), [429]);
    assert_eq!(by_test("configmaps"), [429, 429, 201]);
    assert_eq!(by_test("serviceaccounts"), [504, 201]);
}

/// A leader stopped with SIGSTOP past its renew deadline is fenced: the
/// standby takes the Lease after it expires and provisions, and once the
/// old leader resumes, it writes nothing before it learns it lost.
#[test]
fn a_stopped_leader_is_fenced_before_the_standby_acts() {
    let cluster = "serve-fence";
    let Some((moto, _rt, env)) = with_moto(cluster) else {
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    let audit = work.path().join("audit.jsonl");
    let audit_arg = audit.to_string_lossy().into_owned();
    let s = served_with_moto(moto, cluster, work.path(), 1, &["--audit-log", &audit_arg]);
    let a = ControllerProcess::start(&s, &env, moto, "replica-a");
    let b = ControllerProcess::start(&s, &env, moto, "replica-b");
    let logs = |s: &Served| format!("{}\n--- a:\n{}\n--- b:\n{}", s.log(), a.log(), b.log());
    s.wait_for("a ready pod", Duration::from_secs(120), || {
        s.ready_pods().len() == 1
    });
    let leader = holder(&s).unwrap_or_else(|| panic!("a leader\n{}", logs(&s)));
    let (stopped, standby) = if leader == a.identity {
        (&a, &b)
    } else {
        (&b, &a)
    };
    stopped.signal("-STOP");
    // Work only a leader does: the standby must take over to do it.
    s.kubectl_ok(&["scale", "deployment/web", "-n", "shop", "--replicas=3"]);
    s.wait_for(
        "the standby to take the Lease",
        Duration::from_secs(40),
        || holder(&s).as_deref() == Some(standby.identity.as_str()),
    );
    s.wait_for("three ready pods", Duration::from_secs(120), || {
        s.ready_pods().len() == 3
    });
    stopped.signal("-CONT");
    std::thread::sleep(Duration::from_secs(6));
    let agent = |w: &Value, id: &str| {
        w["userAgent"]
            .as_str()
            .is_some_and(|u| u.contains(&format!("({id})")))
    };
    let writes = audited(&audit);
    let took_over = writes
        .iter()
        .position(|w| {
            agent(w, &standby.identity)
                && w["resource"] == "leases"
                && w["code"].as_u64().is_some_and(|c| c < 300)
        })
        .expect("the standby wrote the Lease");
    let after: Vec<&Value> = writes[took_over..]
        .iter()
        .filter(|w| agent(w, &stopped.identity))
        .filter(|w| w["code"].as_u64().is_some_and(|c| c < 400))
        .collect();
    assert!(
        after.is_empty(),
        "the deposed leader wrote after the standby took over: {after:?}\n{}",
        logs(&s)
    );
    assert!(
        stopped.log().contains("leadership lost"),
        "{}",
        stopped.log()
    );
    // The standby did the work: it created NodeClaims after taking over.
    assert!(
        writes[took_over..]
            .iter()
            .any(|w| agent(w, &standby.identity)
                && w["resource"] == "nodeclaims"
                && w["verb"] == "POST"),
        "{writes:?}"
    );
}

/// A controller whose pass is stuck (every NodeClaim create takes 25 s,
/// within the API call deadline) fails `/healthz` once no pass has
/// finished for its liveness timeout, so the kubelet restarts it.
#[test]
fn healthz_fails_when_the_leaders_passes_stop_finishing() {
    let cluster = "serve-liveness";
    let Some((moto, _rt, env)) = with_moto(cluster) else {
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    let s = served_with_moto(
        moto,
        cluster,
        work.path(),
        2,
        &["--fault", "verb=create,resource=nodeclaims,latency=25s"],
    );
    let c =
        ControllerProcess::start_with(&s, &env, moto, "replica-a", &["--liveness-timeout", "5s"]);
    s.wait_for("the controller to lead", Duration::from_secs(60), || {
        holder(&s).is_some() && c.healthz() == Some(200)
    });
    s.wait_for("/healthz to fail", Duration::from_secs(40), || {
        c.healthz() == Some(503)
    });
}

/// The production binary end to end: `simulate --serve --controller none`
/// with moto as EC2, and two `dovetail controller` processes. Pods get
/// nodes, one replica leads, and NodeClaims, Nodes and instances agree;
/// the leader killed mid-scale-up is replaced by the standby within its
/// lease and no instance leaks; SIGTERM releases the Lease at once.
#[test]
fn the_production_controller_runs_the_served_cluster_with_moto() {
    let cluster = "serve-e2e";
    let Some((moto, rt, env)) = with_moto(cluster) else {
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    let s = served_with_moto(moto, cluster, work.path(), 2, &[]);
    let a = ControllerProcess::start(&s, &env, moto, "replica-a");
    let b = ControllerProcess::start(&s, &env, moto, "replica-b");
    let logs = |s: &Served| format!("{}\n--- a:\n{}\n--- b:\n{}", s.log(), a.log(), b.log());
    s.wait_for(
        "two ready pods on nodes from moto",
        Duration::from_secs(120),
        || s.ready_pods().len() == 2,
    );
    let leader = holder(&s).unwrap_or_else(|| panic!("a leader\n{}", logs(&s)));
    assert!([&a.identity, &b.identity].contains(&&leader), "{leader}");
    let agree = |s: &Served| {
        let [claims, nodes, live] = fleet(s, &env, &rt);
        !claims.is_empty() && claims == nodes && nodes == live
    };
    s.wait_for(
        "NodeClaims, Nodes and instances to agree",
        Duration::from_secs(60),
        || agree(&s),
    );

    // The leader dies mid-scale-up.
    s.kubectl_ok(&["scale", "deployment/web", "-n", "shop", "--replicas=6"]);
    std::thread::sleep(Duration::from_millis(1500));
    let (dead, standby) = if leader == a.identity {
        (&a, &b)
    } else {
        (&b, &a)
    };
    dead.signal("-KILL");
    let killed = Instant::now();
    s.wait_for(
        "the standby to take the Lease",
        Duration::from_secs(40),
        || holder(&s).as_deref() == Some(standby.identity.as_str()),
    );
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "the standby took over after {:?}, beyond the 15 s lease and a retry",
        killed.elapsed()
    );
    s.wait_for("six ready pods", Duration::from_secs(120), || {
        s.ready_pods().len() == 6
    });
    s.wait_for(
        "no leaked instance: NodeClaims, Nodes and instances agree",
        Duration::from_secs(120),
        || agree(&s),
    );

    // SIGTERM: the Lease is released at once.
    standby.signal("-TERM");
    let stopped = Instant::now();
    s.wait_for("the Lease to be released", Duration::from_secs(10), || {
        holder(&s).is_none()
    });
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "released after {:?}\n{}",
        stopped.elapsed(),
        logs(&s)
    );
}

/// kubectl's typed generators send protobuf, as every client-go program
/// does: `kubectl create namespace|deployment|configmap|secret|token`
/// create what they say, read back in JSON.
#[test]
fn kubectl_creates_namespaces_deployments_configmaps_secrets_and_tokens() {
    if !kubectl_installed() {
        return;
    }
    let s = Served::start(&scenario(), &[], &[]);
    s.kubectl_ok(&["create", "namespace", "team-a"]);
    let ns = s.json(&["get", "namespace", "team-a"]);
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team-a"
    );

    s.kubectl_ok(&[
        "create",
        "deployment",
        "api",
        "-n",
        "team-a",
        "--image=example/api:2",
        "--replicas=3",
        "--port=8080",
    ]);
    let d = s.json(&["get", "deployment", "api", "-n", "team-a"]);
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["spec"]["selector"]["matchLabels"]["app"], "api");
    let container = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "example/api:2");
    assert_eq!(container["ports"][0]["containerPort"], 8080);
    // What Go leaves unset is unset, not a stored zero.
    assert!(
        container["ports"][0].get("hostPort").is_none(),
        "{container}"
    );
    assert!(d["spec"].get("paused").is_none(), "{}", d["spec"]);

    s.kubectl_ok(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "team-a",
        "--from-literal=mode=fast",
        "--from-literal=empty=",
    ]);
    let cm = s.json(&["get", "configmap", "settings", "-n", "team-a"]);
    assert_eq!(cm["data"], serde_json::json!({"mode": "fast", "empty": ""}));

    s.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "db",
        "-n",
        "team-a",
        "--from-literal=password=s3cr3t",
    ]);
    let secret = s.json(&["get", "secret", "db", "-n", "team-a"]);
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(secret["data"]["password"], "czNjcjN0");
    let listed = s.kubectl_ok(&["get", "secrets", "-n", "team-a"]);
    assert!(
        lines(&listed)
            .iter()
            .any(|row| row.starts_with(&["db", "Opaque", "1"])),
        "{listed}"
    );

    s.kubectl_ok(&["create", "serviceaccount", "builder", "-n", "team-a"]);
    let token = s.kubectl_ok(&[
        "create",
        "token",
        "builder",
        "-n",
        "team-a",
        "--duration=20m",
    ]);
    let claims = token.trim().split('.').nth(1).expect("a JWT");
    use base64::Engine as _;
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(claims)
            .expect("base64url claims"),
    )
    .expect("JSON claims");
    assert_eq!(claims["sub"], "system:serviceaccount:team-a:builder");
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        1200
    );
    let refused = s.kubectl(&[
        "create",
        "token",
        "builder",
        "-n",
        "team-a",
        "--duration=1m",
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("may not specify a duration less than 10 minutes"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let missing = s.kubectl(&["create", "token", "nobody", "-n", "team-a"]);
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("serviceaccounts \"nobody\" not found")
    );
}

/// A client-go program that sends and accepts nothing but protobuf
/// (testbed/cmd/protoclient) creates, reads, lists, watches, updates and
/// deletes built-in objects, and reads a NotFound Status.
#[test]
fn a_client_go_program_speaking_only_protobuf_works_against_the_served_api() {
    let s = Served::start(&scenario(), &[], &[]);
    let out = Command::new(crate::testbed::bin().join("protoclient"))
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .output()
        .expect("protoclient runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "protoclient failed: {}\n{stdout}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.log()
    );
    for step in [
        "watched ADDED configmap settings",
        "created and read back deployment",
        "requested a token",
        "read NotFound",
    ] {
        assert!(stdout.contains(step), "{stdout}");
    }
    // Built-in kinds answer in protobuf; a custom resource has none, so a
    // client that takes nothing else is told so (406), and one that also
    // takes JSON gets JSON, as from the API server.
    let protobuf = "application/vnd.kubernetes.protobuf";
    let (code, content_type, body) = s.raw_get("/api/v1/namespaces", protobuf);
    assert_eq!((code, content_type.as_str()), (200, protobuf));
    assert!(body.starts_with(b"k8s\0"));
    let (code, _, _) = s.raw_get("/apis/karpenter.sh/v1/nodepools", protobuf);
    assert_eq!(code, 406);
    let (code, content_type, _) = s.raw_get(
        "/apis/karpenter.sh/v1/nodepools",
        &format!("{protobuf}, */*"),
    );
    assert_eq!((code, content_type.as_str()), (200, "application/json"));
}

/// The served API's protobuf descriptors (src/world/serve/protobuf/kubernetes.binpb)
/// are those testbed's k8sprotos compiles from the Kubernetes modules the
/// testbed is built with.
#[test]
fn the_committed_protobuf_descriptors_are_the_testbeds() {
    let out = Command::new(crate::testbed::bin().join("k8sprotos"))
        .current_dir(root().join("testbed"))
        .output()
        .expect("k8sprotos runs");
    assert!(
        out.status.success(),
        "k8sprotos failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let committed = std::fs::read(root().join("src/world/serve/protobuf/kubernetes.binpb"))
        .expect("committed descriptors");
    assert!(
        out.stdout == committed,
        "src/world/serve/protobuf/kubernetes.binpb is stale: regenerate it with \
         (cd testbed && go run ./cmd/k8sprotos) > src/world/serve/protobuf/kubernetes.binpb"
    );
}
