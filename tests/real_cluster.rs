//! The production binary on the real control plane (`tests/testbed.rs`):
//! `deploy/` installed with the testbed's kubectl, two `dovetail controller`
//! processes authenticated as the installed ServiceAccount (every request
//! passes the real RBAC authorizer), moto as EC2, SSM, SQS, IAM and EKS,
//! Nodes registered from the instances' own user data, pods created by the
//! real ReplicaSet controller, bound by the real kube-scheduler, run by
//! KWOK, evicted through the real eviction API against budgets whose status
//! the real disruption controller keeps.
//!
//! Every test ends with moto's running instances, the NodeClaims and the
//! Nodes naming the same instances, and every pod of its workloads Ready.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::aws::Env;
use crate::moto::Moto;
use crate::support::root;
use crate::testbed::{Options, Testbed};

const REGION: &str = "us-east-1";
/// The testbed's Kubernetes minor version: the image parameters are
/// published under it, and the controller discovers it from the API server.
const KUBE_VERSION: &str = "1.36";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The NodePool of these tests: on-demand m5s (moto's CreateFleet gives
/// spot instances no security groups), consolidation after 10 s.
pub fn nodepool(name: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {name}
spec:
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 10s
{extra_spec}  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      expireAfter: Never
      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge, m5.2xlarge]}}
"
    )
}

/// One test's world: moto with a VPC and an EKS cluster, the control plane
/// with `deploy/` installed, a configuration repository, and the
/// controllers started so far.
pub struct World {
    pub tb: Testbed,
    pub moto: Moto,
    pub rt: tokio::runtime::Runtime,
    pub env: Env,
    pub cluster: String,
    pub sa_kubeconfig: PathBuf,
    pub repo: PathBuf,
    pub queue: Option<String>,
    /// More environment of the controllers started from now on (a
    /// chart's settings, as its pods get them); their flags win over it.
    pub controller_env: Vec<(String, String)>,
    pub controllers: Vec<Controller>,
}

impl World {
    /// A world for the test `name`, with `deploy/` applied by
    /// `kubectl apply -k` (or with `server_side`, `kubectl apply
    /// --server-side -k` of an overlay with the prune component, as a user
    /// who prunes installs it).
    pub fn new(name: &str, server_side: bool) -> World {
        World::with_install(name, "dovetail", |tb, _| {
            let deploy = root().join("deploy");
            if server_side {
                let overlay = tb.dir.path().join("overlay");
                std::fs::create_dir_all(&overlay).expect("overlay");
                crate::support::deploy_overlay(&overlay, &["prune"]);
                tb.kubectl_ok(&[
                    "apply",
                    "--server-side",
                    "-k",
                    overlay.to_str().expect("UTF-8"),
                ]);
            } else {
                tb.kubectl_ok(&["apply", "-k", deploy.to_str().expect("UTF-8 path")]);
            }
        })
    }

    /// A world for the test `name` whose dovetail is installed by
    /// `install` (given the control plane and the name of moto's EKS
    /// cluster, made by then), in the namespace `dovetail`, the controllers
    /// running as the ServiceAccount `account` it creates there.
    pub fn with_install(name: &str, account: &str, install: impl FnOnce(&Testbed, &str)) -> World {
        let moto = crate::moto::own();
        let rt = runtime();
        let cluster = format!("testbed-{name}");
        let env = rt.block_on(Env::for_version(
            &moto.endpoint(),
            REGION,
            &cluster,
            KUBE_VERSION,
        ));
        rt.block_on(create_eks_cluster(&moto.endpoint(), &cluster));
        let tb = Testbed::up(&Options {
            ec2: Some((moto.endpoint(), cluster.clone())),
            region: Some(REGION.to_string()),
            ..Options::default()
        });
        install(&tb, &cluster);
        let sa_kubeconfig = tb.service_account_kubeconfig("dovetail", account);
        let repo = tb.dir.path().join("repo");
        std::fs::create_dir_all(&repo).expect("repo");
        git(&repo, &["init", "-q", "-b", "main"]);
        let world = World {
            tb,
            moto,
            rt,
            env,
            cluster,
            sa_kubeconfig,
            repo,
            queue: None,
            controller_env: Vec::new(),
            controllers: Vec::new(),
        };
        world.commit(
            &[
                ("nodeclass.yaml", Some(&world.nodeclass())),
                ("nodepool.yaml", Some(&nodepool("default", ""))),
            ],
            "node class and pool",
        );
        world
    }

    pub fn nodeclass(&self) -> String {
        format!(
            "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiSelectorTerms: [{{alias: al2023@latest}}]
  role: KarpenterNodeRole-{0}
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: {0}}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: {0}}}}}]
",
            self.cluster
        )
    }

    /// Writes (or with `None` removes) files of the repository and commits.
    pub fn commit(&self, files: &[(&str, Option<&str>)], message: &str) -> String {
        for (name, content) in files {
            let path = self.repo.join(name);
            match content {
                Some(text) => std::fs::write(&path, text).expect("write"),
                None => std::fs::remove_file(&path).expect("remove"),
            }
        }
        git(&self.repo, &["add", "-A"]);
        git(&self.repo, &["commit", "-q", "-m", message]);
        git(&self.repo, &["rev-parse", "HEAD"]).trim().to_string()
    }

    /// An SQS queue for interruption events, before the controllers start.
    pub fn interruption_queue(&mut self) -> String {
        let name = format!("{}-interruption", self.cluster);
        let endpoint = self.moto.endpoint();
        let url = self.rt.block_on(async {
            crate::moto::sqs_client(&endpoint, REGION)
                .await
                .create_queue()
                .queue_name(&name)
                .send()
                .await
                .expect("CreateQueue")
                .queue_url()
                .expect("a queue URL")
                .to_string()
        });
        self.queue = Some(name);
        url
    }

    /// Starts `dovetail controller` as `identity`.
    pub fn start_controller(&mut self, identity: &str, extra: &[&str]) {
        let c = Controller::start(self, identity, extra);
        self.controllers.push(c);
    }

    pub fn controller(&self, identity: &str) -> &Controller {
        self.controllers
            .iter()
            .find(|c| c.identity == identity)
            .unwrap_or_else(|| panic!("no controller {identity}"))
    }

    /// The Lease's holder, if any.
    pub fn leader(&self) -> Option<String> {
        let out = self.tb.kubectl(&[
            "get",
            "lease",
            "dovetail-leader",
            "-n",
            "dovetail",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ]);
        let holder = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !holder.is_empty()).then_some(holder)
    }

    /// A Deployment in `default` of `replicas` pods requesting `cpu`.
    pub fn deployment(&self, name: &str, replicas: usize, cpu: &str, extra_pod_spec: &str) {
        self.tb.apply(&format!(
            "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 5
{extra_pod_spec}      containers:
        - name: app
          image: registry.example.com/{name}:1
          resources: {{requests: {{cpu: \"{cpu}\", memory: 256Mi}}}}
"
        ));
    }

    pub fn scale(&self, name: &str, replicas: usize) {
        self.tb.kubectl_ok(&[
            "scale",
            "deployment",
            name,
            "-n",
            "default",
            &format!("--replicas={replicas}"),
        ]);
    }

    /// The Deployment's ready replicas, as its status says.
    pub fn ready(&self, name: &str) -> u64 {
        self.tb.json(&["get", "deployment", name, "-n", "default"])["status"]["readyReplicas"]
            .as_u64()
            .unwrap_or(0)
    }

    /// Waits for `replicas` ready pods of the Deployment, each on a Node
    /// that a NodeClaim launched.
    /// Waits for `replicas` ready pods of the Deployment `name`; on a
    /// timeout, fails with the cluster's state and the controllers' logs,
    /// so that a failure under load can be read afterwards.
    pub fn wait_ready(&self, name: &str, replicas: u64, within: Duration) {
        let deadline = Instant::now() + within;
        while !(self.ready(name) == replicas && self.pods(name).len() as u64 == replicas) {
            assert!(
                Instant::now() < deadline,
                "timed out after {within:?} waiting for {replicas} ready pods of {name}\n{}\n{}",
                self.tb.describe(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The Deployment's pods that are not terminating.
    pub fn pods(&self, app: &str) -> Vec<Value> {
        self.tb
            .items(&["pods", "-n", "default", "-l", &format!("app={app}")])
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect()
    }

    pub fn nodeclaims(&self) -> Vec<Value> {
        self.tb.items(&["nodeclaims"])
    }

    /// Instance ids: of the NodeClaims, of the Nodes, and of moto's
    /// instances of the cluster that are not terminated.
    pub fn fleet(&self) -> [BTreeSet<String>; 3] {
        let ids = |items: Vec<Value>, pointer: &str| -> BTreeSet<String> {
            items
                .iter()
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
        let claims = ids(self.nodeclaims(), "/status/providerID");
        let nodes = ids(self.tb.items(&["nodes"]), "/spec/providerID");
        let live = self
            .instances()
            .into_iter()
            .filter(|(_, state)| !matches!(state.as_str(), "terminated" | "shutting-down"))
            .map(|(id, _)| id)
            .collect();
        [claims, nodes, live]
    }

    /// Every instance moto holds for the cluster, with its state.
    pub fn instances(&self) -> Vec<(String, String)> {
        self.rt.block_on(async {
            let out = self
                .env
                .ec2
                .describe_instances()
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name(format!("tag:kubernetes.io/cluster/{}", self.cluster))
                        .values("owned")
                        .build(),
                )
                .send()
                .await
                .expect("DescribeInstances");
            out.reservations()
                .iter()
                .flat_map(|r| r.instances())
                .filter_map(|i| {
                    Some((
                        i.instance_id()?.to_string(),
                        i.state()?.name()?.as_str().to_string(),
                    ))
                })
                .collect()
        })
    }

    /// Waits until the instances, NodeClaims and Nodes are the same set.
    pub fn wait_consistent(&self, within: Duration) -> BTreeSet<String> {
        let mut last = None;
        self.tb
            .wait_for("instances = NodeClaims = Nodes", within, || {
                let [claims, nodes, live] = self.fleet();
                let same = claims == nodes && nodes == live;
                last = Some(live);
                same
            });
        last.expect("checked once")
    }

    /// The controllers' logs, for a failing assertion.
    pub fn logs(&self) -> String {
        self.controllers
            .iter()
            .map(|c| format!("--- controller {}:\n{}", c.identity, c.log_tail(40)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The audit events of dovetail's service account.
    pub fn dovetail_requests(&self) -> Vec<Value> {
        self.tb
            .audit()
            .into_iter()
            .filter(|e| e["user"]["username"] == "system:serviceaccount:dovetail:dovetail")
            .collect()
    }

    /// Fails if dovetail labelled a Node initialised while it still
    /// carried a taint of a node starting up (the cloud node lifecycle's
    /// `uninitialized`, the node lifecycle controller's `not-ready`): the
    /// reference initialises only once they are gone, and an initialised
    /// node is planned on with its taints. Only the update that adds the
    /// label is read: a node that fails later is tainted again.
    pub fn assert_initialized_only_untainted(&self) {
        let mut labelled = BTreeSet::new();
        let mut early = Vec::new();
        for e in self.dovetail_requests() {
            let node = &e["requestObject"];
            if e["verb"] != "update"
                || e["objectRef"]["resource"] != "nodes"
                || node["metadata"]["labels"]["karpenter.sh/initialized"] != "true"
            {
                continue;
            }
            let name = node["metadata"]["name"].as_str().unwrap_or_default();
            if !labelled.insert(name.to_string()) {
                continue;
            }
            let starting: Vec<&str> = node["spec"]["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| {
                    dovetail::model::taints::is_known_ephemeral(
                        t["key"].as_str().unwrap_or_default(),
                        t["effect"].as_str().unwrap_or_default(),
                    )
                })
                .filter_map(|t| t["key"].as_str())
                .collect();
            if !starting.is_empty() {
                early.push(format!("{name}: {starting:?}"));
            }
        }
        assert!(
            early.is_empty(),
            "initialised while still tainted: {early:?}"
        );
    }

    /// Fails if the installed RBAC refused any request of dovetail's.
    pub fn assert_nothing_forbidden(&self) {
        let forbidden: Vec<String> = self
            .dovetail_requests()
            .iter()
            .filter(|e| e["responseStatus"]["code"] == 403)
            .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
            .collect();
        assert!(forbidden.is_empty(), "refused by RBAC: {forbidden:?}");
    }

    /// A PodDisruptionBudget `name` in `default` over the pods labelled
    /// `app: name`, allowing `max_unavailable` of them down.
    pub fn budget(&self, name: &str, max_unavailable: u32) {
        self.tb.apply(&format!(
            "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: {name}, namespace: default}}
spec:
  maxUnavailable: {max_unavailable}
  selector: {{matchLabels: {{app: {name}}}}}
"
        ));
    }
}

async fn create_eks_cluster(endpoint: &str, cluster: &str) {
    let sdk = crate::moto::sdk_config(endpoint, REGION).await;
    let ec2 = aws_sdk_ec2::Client::new(&sdk);
    let subnets: Vec<String> = ec2
        .describe_subnets()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:karpenter.sh/discovery")
                .values(cluster)
                .build(),
        )
        .send()
        .await
        .expect("DescribeSubnets")
        .subnets()
        .iter()
        .filter_map(|s| s.subnet_id().map(String::from))
        .collect();
    aws_sdk_eks::Client::new(&sdk)
        .create_cluster()
        .name(cluster)
        .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder()
                .set_subnet_ids(Some(subnets))
                .build(),
        )
        .kubernetes_network_config(
            aws_sdk_eks::types::KubernetesNetworkConfigRequest::builder()
                .service_ipv4_cidr("10.100.0.0/16")
                .build(),
        )
        .send()
        .await
        .expect("eks:CreateCluster");
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=test", "-c", "user.email=test@example.com"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// A `dovetail controller` process of a [`World`].
pub struct Controller {
    pub identity: String,
    child: Child,
    log: PathBuf,
    health: String,
    metrics: String,
}

impl Controller {
    /// Starts the controller of a [`World`] as `identity`.
    fn start(w: &World, identity: &str, extra: &[&str]) -> Controller {
        Controller::start_with(w.tb.dir.path(), identity, |cmd| {
            cmd.arg("--kubeconfig")
                .arg(&w.sa_kubeconfig)
                .args(["--cluster-name", &w.cluster, "--region", REGION])
                .args(["--endpoint-url", &w.moto.endpoint()])
                .args(["--ssm-parameter-root", &w.env.ssm_root, "--isolated-vpc"])
                .arg("--pricing-file")
                .arg(root().join("tests/fixtures/aws/prices.json"))
                .arg("--config-repo")
                .arg(&w.repo)
                .args([
                    "--config-branch",
                    "main",
                    "--poll-interval",
                    "2s",
                    "--prune",
                ])
                .args(["--identity", identity, "--namespace", "dovetail"])
                .args(extra)
                .envs(w.moto.sdk_env(REGION))
                .envs(w.controller_env.iter().cloned());
            if let Some(queue) = &w.queue {
                cmd.args(["--interruption-queue", queue]);
            }
        })
    }

    /// Starts `dovetail controller` with the flags `configure` adds (its
    /// log in `dir`); if a port it was given was taken before it bound it
    /// (by another test's process), starts it again on others.
    pub fn start_with(dir: &Path, identity: &str, configure: impl Fn(&mut Command)) -> Controller {
        for _ in 0..5 {
            let mut c = Self::spawn(dir, identity, &configure);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && c.healthz().is_none() && !c.exited() {
                std::thread::sleep(Duration::from_millis(100));
            }
            if c.exited() && c.log().contains("Address already in use") {
                continue;
            }
            return c;
        }
        panic!("controller {identity} found no free ports");
    }

    fn spawn(dir: &Path, identity: &str, configure: &impl Fn(&mut Command)) -> Controller {
        let port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port()
                .to_string()
        };
        let log = dir.join(format!("controller-{identity}.log"));
        let (health, metrics) = (port(), port());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dovetail"));
        cmd.arg("controller")
            .env("DOVETAIL_LOG_LEVEL", "info")
            .args(["--metrics-port", &metrics, "--health-port", &health]);
        configure(&mut cmd);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"));
        Controller {
            identity: identity.to_string(),
            child: cmd.spawn().expect("dovetail controller starts"),
            log,
            health: format!("127.0.0.1:{health}"),
            metrics: format!("127.0.0.1:{metrics}"),
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {signal} {}", self.child.id());
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    /// `/healthz`'s status code, if it answers.
    pub fn healthz(&self) -> Option<u16> {
        http_get(&self.health, "/healthz").map(|(status, _)| status)
    }

    /// The text of `/metrics`, if it answers 200.
    pub fn metrics(&self) -> Option<String> {
        http_get(&self.metrics, "/metrics")
            .and_then(|(status, body)| (status == 200).then_some(body))
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` over HTTP/1.1: the status code and the body (not chunked:
/// the controller's server sends a length).
fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let status = answer.split_whitespace().nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// Polls `f` every half second for `within`, returning the first `Some`.
pub(crate) fn eventually<T>(
    what: &str,
    w: &World,
    within: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out after {within:?} waiting for {what}\n{}\n{}",
                w.tb.describe(),
                w.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `kubectl apply -k deploy/` installs on the real API server (the CRDs and
/// their CEL rules, the RBAC, the Deployment); the controller, as the
/// installed ServiceAccount, applies the committed NodePool and
/// EC2NodeClass by server-side apply with dovetail's labels and
/// annotations; a commit that does not validate applies nothing, not even
/// its valid objects; a valid one applies; a file removed is pruned.
#[test]
fn sync_applies_by_server_side_apply_refuses_an_invalid_commit_and_prunes() {
    let mut w = World::new("sync", true);
    w.start_controller("a", &[]);
    let first = git(&w.repo, &["rev-parse", "HEAD"]).trim().to_string();
    let applied = |name: &str| {
        let out = w.tb.kubectl(&[
            "get",
            "nodepool",
            name,
            "-o",
            "json",
            "--show-managed-fields",
        ]);
        out.status
            .success()
            .then(|| serde_json::from_slice::<Value>(&out.stdout).expect("JSON"))
    };
    let pool = eventually(
        "the committed NodePool",
        &w,
        Duration::from_secs(60),
        || applied("default"),
    );
    assert_eq!(
        pool["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "dovetail"
    );
    assert_eq!(
        pool["metadata"]["annotations"]["dovetail.dev/revision"],
        format!("main@sha1:{first}")
    );
    assert_eq!(
        pool["metadata"]["annotations"]["dovetail.dev/source"],
        "nodepool.yaml"
    );
    let managers: Vec<&str> = pool["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .filter_map(|m| {
            (m["operation"] == "Apply")
                .then(|| m["manager"].as_str())
                .flatten()
        })
        .collect();
    assert!(!managers.is_empty(), "applied server-side: {pool}");
    let class = w.tb.json(&["get", "ec2nodeclass", "default"]);
    assert_eq!(
        class["metadata"]["annotations"]["dovetail.dev/source"],
        "nodeclass.yaml"
    );

    // A valid new NodePool beside an invalid change: nothing is applied.
    w.commit(
        &[
            ("batch.yaml", Some(&nodepool("batch", ""))),
            (
                "nodepool.yaml",
                Some(
                    &nodepool("default", "")
                        .replace("consolidateAfter: 10s", "consolidateAfter: 10 minutes"),
                ),
            ),
        ],
        "an invalid duration",
    );
    eventually(
        "the controller to refuse the commit",
        &w,
        Duration::from_secs(60),
        || {
            w.controller("a")
                .log()
                .contains("consolidateAfter")
                .then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        applied("batch").is_none(),
        "a NodePool of an invalid commit was applied"
    );
    let pool = applied("default").expect("still there");
    assert_eq!(pool["spec"]["disruption"]["consolidateAfter"], "10s");

    // Fixed: both apply; then the new pool's file goes and it is pruned.
    let fixed = w.commit(
        &[("nodepool.yaml", Some(&nodepool("default", "")))],
        "fixed",
    );
    let batch = eventually("the batch NodePool", &w, Duration::from_secs(60), || {
        applied("batch")
    });
    assert_eq!(
        batch["metadata"]["annotations"]["dovetail.dev/revision"],
        format!("main@sha1:{fixed}")
    );
    w.commit(&[("batch.yaml", None)], "no batch pool");
    eventually(
        "the batch NodePool pruned",
        &w,
        Duration::from_secs(60),
        || applied("batch").is_none().then_some(()),
    );
    assert!(applied("default").is_some());

    // A NodeOverlay (its feature gate off, as Karpenter's default is) is
    // applied once, not again on every pass, and pruned when its file goes.
    let overlay = "apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: prefer-large}
spec:
  requirements: [{key: karpenter.k8s.aws/instance-size, operator: In, values: [large]}]
  priceAdjustment: \"-5%\"
";
    w.commit(&[("overlay.yaml", Some(overlay))], "an overlay");
    let overlay_exists = || {
        w.tb.kubectl(&["get", "nodeoverlay", "prefer-large"])
            .status
            .success()
    };
    eventually("the NodeOverlay", &w, Duration::from_secs(60), || {
        overlay_exists().then_some(())
    });
    // Ten polls of the repository (2 s apart) later: still one apply.
    std::thread::sleep(Duration::from_secs(20));
    let events = w.dovetail_requests();
    let writes = succeeded(&events, "patch", "nodeoverlays", None)
        .into_iter()
        .filter(|e| {
            !e["requestURI"]
                .as_str()
                .unwrap_or_default()
                .contains("dryRun")
        })
        .count();
    assert_eq!(writes, 1, "the NodeOverlay was applied {writes} times");
    w.commit(&[("overlay.yaml", None)], "no overlay");
    eventually(
        "the NodeOverlay pruned",
        &w,
        Duration::from_secs(60),
        || (!overlay_exists()).then_some(()),
    );

    // Every request the controller made was allowed by the installed RBAC.
    w.assert_nothing_forbidden();
    w.wait_consistent(Duration::from_secs(30));
}

/// A Deployment scaled from 0 to 40: the real ReplicaSet controller creates
/// the pods, dovetail launches instances in moto, the registrar registers
/// their Nodes from the instances' user data, the real scheduler binds the
/// pods and KWOK runs them. Each Node is what dovetail's NodeClaim said it
/// would be: same allocatable CPU, memory and pods, the NodePool's labels,
/// its taints gone once initialized.
#[test]
fn a_deployment_scaled_from_0_to_40_is_scheduled_by_the_real_scheduler_onto_launched_nodes() {
    let mut w = World::new("provision", false);
    w.start_controller("a", &[]);
    w.start_controller("b", &[]);
    w.deployment("web", 0, "500m", "");
    w.scale("web", 40);
    w.wait_ready("web", 40, Duration::from_secs(240));
    let ids = w.wait_consistent(Duration::from_secs(60));
    assert!(!ids.is_empty());
    w.assert_initialized_only_untainted();
    let nodes = w.tb.items(&["nodes"]);
    for pod in w.pods("web") {
        let node = pod["spec"]["nodeName"].as_str().expect("bound");
        let node = nodes
            .iter()
            .find(|n| n["metadata"]["name"] == node)
            .unwrap_or_else(|| panic!("pod on unknown node {node}"));
        assert_eq!(
            node["metadata"]["labels"]["karpenter.sh/nodepool"],
            "default"
        );
    }
    for claim in w.nodeclaims() {
        let name = claim["status"]["nodeName"].as_str().expect("registered");
        let node = nodes
            .iter()
            .find(|n| n["metadata"]["name"] == name)
            .expect("the claim's node");
        for resource in ["cpu", "memory", "pods", "ephemeral-storage"] {
            let q = |v: &Value| {
                dovetail::model::quantity::parse_quantity(resource, v.as_str().unwrap_or("0"))
                    .unwrap_or_else(|e| panic!("{resource}: {e}"))
            };
            assert_eq!(
                q(&node["status"]["allocatable"][resource]),
                q(&claim["status"]["allocatable"][resource]),
                "{name}: allocatable {resource}: the Node registered from the user data says {}, the NodeClaim {}",
                node["status"]["allocatable"][resource],
                claim["status"]["allocatable"][resource]
            );
        }
        let taints: Vec<&str> = node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["key"].as_str())
            .collect();
        assert!(taints.is_empty(), "{name} keeps taints {taints:?}");
        let conditions: Vec<(&str, &str)> = claim["status"]["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .filter_map(|c| Some((c["type"].as_str()?, c["status"].as_str()?)))
            .collect();
        for c in ["Launched", "Registered", "Initialized", "Ready"] {
            assert!(conditions.contains(&(c, "True")), "{name}: {conditions:?}");
        }
    }
    // Only the leader launched.
    let leader = w.leader().expect("a leader");
    let launched_by: BTreeSet<String> = w
        .dovetail_requests()
        .iter()
        .filter(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "nodeclaims")
        .filter_map(|e| e["userAgent"].as_str().map(String::from))
        .collect();
    assert!(
        launched_by
            .iter()
            .all(|ua| ua.contains(&format!("({leader})"))),
        "NodeClaims created by {launched_by:?}, the leader is {leader}"
    );
}

/// The NodeClaims being disrupted: deleting, or their Node tainted
/// `karpenter.sh/disrupted`.
fn disrupting(w: &World) -> BTreeSet<String> {
    let tainted: BTreeSet<String> =
        w.tb.items(&["nodes"])
            .iter()
            .filter(|n| {
                n["spec"]["taints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|t| t["key"] == "karpenter.sh/disrupted")
            })
            .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
            .collect();
    w.nodeclaims()
        .iter()
        .filter(|c| {
            !c["metadata"]["deletionTimestamp"].is_null()
                || c["status"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| tainted.contains(n))
        })
        .filter_map(|c| c["metadata"]["name"].as_str().map(String::from))
        .collect()
}

/// The audit events of dovetail's requests that succeeded, of `verb` on
/// `resource` (with `subresource`, if any).
pub(crate) fn succeeded<'a>(
    events: &'a [Value],
    verb: &str,
    resource: &str,
    subresource: Option<&str>,
) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| {
            e["verb"] == verb
                && e["objectRef"]["resource"] == resource
                && e["objectRef"]["subresource"].as_str() == subresource
                && e["responseStatus"]["code"]
                    .as_u64()
                    .is_some_and(|c| (200..300).contains(&c))
        })
        .collect()
}

/// After a scale-down from 40 pods to 6 behind a PodDisruptionBudget of
/// one, consolidation removes the empty and underutilized nodes: every pod
/// leaves through the real eviction API (none is deleted), the budget the
/// real disruption controller computes is never broken, and the fleet ends
/// at what 6 pods need.
#[test]
fn consolidation_after_a_scale_down_evicts_through_the_eviction_api_within_the_budget() {
    let mut w = World::new("consolidate", false);
    w.start_controller("a", &[]);
    w.budget("web", 1);
    w.deployment("web", 40, "500m", "");
    w.wait_ready("web", 40, Duration::from_secs(240));
    let before = w.wait_consistent(Duration::from_secs(60));
    w.scale("web", 6);
    w.wait_ready("web", 6, Duration::from_secs(60));
    // 6 × 500m need 3 CPUs: the cheapest fleets (one m5.xlarge, or two
    // m5.large) have 4, whichever nodes the remaining pods are spread over.
    let mut least_ready = 6;
    eventually(
        "consolidation to 4 vCPUs",
        &w,
        Duration::from_secs(300),
        || {
            least_ready = least_ready.min(w.ready("web"));
            let cpus: i64 = w
                .nodeclaims()
                .iter()
                .map(|c| {
                    let cpu = c["status"]["capacity"]["cpu"].as_str().unwrap_or("0");
                    dovetail::model::quantity::parse_quantity("cpu", cpu).expect("a quantity")
                })
                .sum();
            (cpus <= 4000 && disrupting(&w).is_empty()).then_some(())
        },
    );
    w.wait_ready("web", 6, Duration::from_secs(120));
    let after = w.wait_consistent(Duration::from_secs(60));
    assert!(after.len() < before.len(), "{before:?} → {after:?}");
    assert!(
        least_ready >= 5,
        "the budget allows one pod down; {least_ready} of 6 were ready"
    );
    let events = w.dovetail_requests();
    let evictions = succeeded(&events, "create", "pods", Some("eviction"));
    assert!(!evictions.is_empty(), "no eviction succeeded\n{}", w.logs());
    let deletes = succeeded(&events, "delete", "pods", None);
    assert!(
        deletes.is_empty(),
        "pods deleted instead of evicted: {deletes:?}"
    );
}

/// A new image published in SSM drifts every node; dovetail replaces them
/// one at a time (the NodePool's budget is one node), each replacement
/// running before its node is drained, and ends with every node on the new
/// image.
#[test]
fn a_new_ssm_image_drifts_the_nodes_and_they_are_replaced_within_the_budget() {
    let mut w = World::new("drift", false);
    w.commit(
        &[(
            "nodepool.yaml",
            Some(&nodepool("default", "    budgets: [{nodes: \"1\"}]\n")),
        )],
        "a budget of one node",
    );
    w.start_controller("a", &[]);
    let spread = "      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - topologyKey: kubernetes.io/hostname
              labelSelector: {matchLabels: {app: spread}}
";
    w.deployment("spread", 4, "500m", spread);
    w.wait_ready("spread", 4, Duration::from_secs(180));
    let old = w.wait_consistent(Duration::from_secs(60));
    assert_eq!(old.len(), 4, "one node per pod");
    w.assert_initialized_only_untainted();
    let image = |c: &Value| {
        c["status"]["imageID"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(w.nodeclaims().iter().all(|c| image(c) == w.env.images[0]));
    w.rt.block_on(w.env.publish(1));
    let mut most = 0;
    eventually(
        "every node on the new image",
        &w,
        Duration::from_secs(480),
        || {
            most = most.max(disrupting(&w).len());
            let claims = w.nodeclaims();
            (claims.len() == 4 && claims.iter().all(|c| image(c) == w.env.images[1])).then_some(())
        },
    );
    assert!(
        most <= 1,
        "{most} nodes were disrupted at once; the budget is one"
    );
    w.wait_ready("spread", 4, Duration::from_secs(120));
    let new = w.wait_consistent(Duration::from_secs(120));
    assert!(
        new.is_disjoint(&old),
        "old instances remain: {:?}",
        new.intersection(&old)
    );
}

/// A NodePool's `expireAfter` deletes its nodes when they expire, whatever
/// blocks their drain; a budget that allows no eviction holds the pods only
/// until the `terminationGracePeriod`, after which they are deleted and the
/// instance terminated. Their replacements run (on a second NodePool: a
/// change of `expireAfter` would drift the first, as in Karpenter, so the
/// expiring pool is closed by a limit instead, which drifts nothing).
#[test]
fn expired_nodes_are_drained_within_their_termination_grace_period() {
    let mut w = World::new("expire", false);
    let expiring = |limits: &str| {
        nodepool("default", "")
            .replace(
                "expireAfter: Never",
                "expireAfter: 40s\n      terminationGracePeriod: 20s",
            )
            .replace(
                "spec:\n  disruption:",
                &format!("spec:\n  weight: 10\n{limits}  disruption:"),
            )
    };
    w.commit(
        &[
            ("nodepool.yaml", Some(&expiring(""))),
            ("stable.yaml", Some(&nodepool("stable", ""))),
        ],
        "expire after 40 s",
    );
    w.start_controller("a", &[]);
    w.budget("pinned", 0);
    w.deployment("pinned", 2, "500m", "");
    w.wait_ready("pinned", 2, Duration::from_secs(120));
    let first: std::collections::BTreeMap<String, f64> = w
        .nodeclaims()
        .iter()
        .filter_map(|c| {
            Some((
                c["metadata"]["name"].as_str()?.to_string(),
                chrono_like(c["metadata"]["creationTimestamp"].as_str()?),
            ))
        })
        .collect();
    assert!(
        w.nodeclaims()
            .iter()
            .all(|c| c["metadata"]["labels"]["karpenter.sh/nodepool"] == "default"),
        "the heavier pool launches first"
    );
    // Replacements come from the stable pool and do not expire in turn.
    w.commit(
        &[("nodepool.yaml", Some(&expiring("  limits: {cpu: \"0\"}\n")))],
        "no more expiring nodes",
    );
    eventually("the first nodes gone", &w, Duration::from_secs(240), || {
        let now: BTreeSet<String> = w
            .nodeclaims()
            .iter()
            .filter_map(|c| c["metadata"]["name"].as_str().map(String::from))
            .collect();
        now.iter().all(|c| !first.contains_key(c)).then_some(())
    });
    w.wait_ready("pinned", 2, Duration::from_secs(180));
    w.wait_consistent(Duration::from_secs(60));
    let events = w.dovetail_requests();
    let time =
        |e: &Value| chrono_like(e["requestReceivedTimestamp"].as_str().expect("a timestamp"));
    for (claim, &created) in &first {
        let deleted = succeeded(&events, "delete", "nodeclaims", None)
            .into_iter()
            .find(|e| e["objectRef"]["name"] == claim.as_str())
            .unwrap_or_else(|| panic!("{claim} was not deleted by dovetail"));
        assert!(
            time(deleted) - created >= 39.0,
            "{claim} deleted {} s after its creation; it expires after 40 s",
            time(deleted) - created
        );
        // Its pods could not be evicted (the budget allows none): they were
        // deleted so that their own 5 s grace period ends with the node's
        // 20 s, as Karpenter deletes them (15 s after the claim).
        let forced: Vec<f64> = succeeded(&events, "delete", "pods", None)
            .into_iter()
            .map(time)
            .filter(|t| *t > time(deleted))
            .collect();
        assert!(
            !forced.is_empty(),
            "no pod was deleted after {claim}'s deletion"
        );
        let after: Vec<f64> = forced.iter().map(|t| t - time(deleted)).collect();
        assert!(
            after.iter().all(|t| (14.0..=21.0).contains(t)),
            "pods deleted {after:?} s after {claim}; its grace period is 20 s, theirs 5 s"
        );
    }
}

/// Seconds since the epoch of an RFC 3339 timestamp.
fn chrono_like(s: &str) -> f64 {
    let t: jiff::Timestamp = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
    t.as_millisecond() as f64 / 1000.0
}

/// AWS's documented EventBridge samples, sent to moto's SQS queue with the
/// test's instance ids: a spot interruption warning, a scheduled change
/// and an instance stopping each take their node away and its pods run
/// elsewhere; a rebalance recommendation changes nothing (as in Karpenter
/// without the rebalance option).
#[test]
fn interruption_events_from_sqs_replace_the_nodes_they_name() {
    let mut w = World::new("interrupt", false);
    let queue_url = w.interruption_queue();
    w.start_controller("a", &[]);
    let spread = "      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - topologyKey: kubernetes.io/hostname
              labelSelector: {matchLabels: {app: spread}}
";
    w.deployment("spread", 4, "500m", spread);
    w.wait_ready("spread", 4, Duration::from_secs(180));
    let ids: Vec<String> = w
        .wait_consistent(Duration::from_secs(60))
        .into_iter()
        .collect();
    assert_eq!(ids.len(), 4);
    let sample = |file: &str, sample_id: &str, id: &str| {
        std::fs::read_to_string(root().join("tests/fixtures/interruption").join(file))
            .expect("a sample event")
            .replace(sample_id, id)
    };
    let messages = [
        sample("spot-interruption.json", "i-1234567890abcdef0", &ids[0]),
        sample(
            "rebalance-recommendation.json",
            "i-1234567890abcdef0",
            &ids[1],
        ),
        sample("scheduled-change.json", "i-0abcd1111ef234567", &ids[2]),
        sample(
            "state-change-shutting-down.json",
            "i-0abcd1111ef234567",
            &ids[3],
        )
        .replace("shutting-down", "stopping"),
    ];
    let endpoint = w.moto.endpoint();
    w.rt.block_on(async {
        let sqs = crate::moto::sqs_client(&endpoint, REGION).await;
        for body in &messages {
            sqs.send_message()
                .queue_url(&queue_url)
                .message_body(body)
                .send()
                .await
                .expect("SendMessage");
        }
    });
    let interrupted = [&ids[0], &ids[2], &ids[3]];
    eventually(
        "the interrupted nodes replaced",
        &w,
        Duration::from_secs(240),
        || {
            let [claims, ..] = w.fleet();
            (claims.len() == 4 && interrupted.iter().all(|id| !claims.contains(*id))).then_some(())
        },
    );
    w.wait_ready("spread", 4, Duration::from_secs(120));
    let now = w.wait_consistent(Duration::from_secs(120));
    assert!(
        now.contains(&ids[1]),
        "the rebalance recommendation took {} away",
        ids[1]
    );
    let states: std::collections::BTreeMap<String, String> = w.instances().into_iter().collect();
    for id in interrupted {
        assert_eq!(states[id.as_str()], "terminated", "{id}");
    }
}

/// Two controllers: the leader is killed (`kill -9`) in the middle of a
/// scale-up and the standby finishes it without launching anything twice;
/// a leader frozen by SIGSTOP loses the Lease and writes nothing once the
/// other has taken it, even after SIGCONT; a leader stopped by SIGTERM
/// releases the Lease at once.
#[test]
fn leaders_killed_frozen_and_stopped_hand_over_without_double_launches() {
    let mut w = World::new("leader", false);
    w.start_controller("a", &[]);
    w.start_controller("b", &[]);
    let first = eventually("a leader", &w, Duration::from_secs(60), || w.leader());
    w.deployment("web", 0, "500m", "");
    w.scale("web", 20);
    eventually("the first NodeClaim", &w, Duration::from_secs(60), || {
        (!w.nodeclaims().is_empty()).then_some(())
    });
    w.controller(&first).signal("-KILL");
    let second = eventually("another leader", &w, Duration::from_secs(60), || {
        w.leader().filter(|l| *l != first)
    });
    w.wait_ready("web", 20, Duration::from_secs(240));
    w.wait_consistent(Duration::from_secs(60));

    // A third controller stands by; the leader freezes.
    w.start_controller("c", &[]);
    std::thread::sleep(Duration::from_secs(5));
    w.controller(&second).signal("-STOP");
    w.scale("web", 30);
    let third = eventually(
        "a leader after the freeze",
        &w,
        Duration::from_secs(90),
        || w.leader().filter(|l| *l != second),
    );
    let takeover = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
    w.wait_ready("web", 30, Duration::from_secs(240));
    w.controller(&second).signal("-CONT");
    std::thread::sleep(Duration::from_secs(10));
    let late: Vec<String> = w
        .dovetail_requests()
        .iter()
        .filter(|e| !matches!(e["verb"].as_str(), Some("get" | "list" | "watch")))
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| c < 300)
        })
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .is_some_and(|ua| ua.contains(&format!("({second})")))
        })
        .filter(|e| {
            chrono_like(e["requestReceivedTimestamp"].as_str().unwrap_or_default()) > takeover
        })
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect();
    assert!(
        late.is_empty(),
        "{second} wrote after {third} took over: {late:?}"
    );

    // SIGTERM releases the Lease: the next leader takes it well within the
    // 15 s a lapsed Lease would take.
    let stopped_at = Instant::now();
    w.controller(&third).signal("-TERM");
    let fourth = eventually(
        "a leader after SIGTERM",
        &w,
        Duration::from_secs(30),
        || w.leader().filter(|l| *l != third),
    );
    assert!(
        stopped_at.elapsed() < Duration::from_secs(10),
        "{fourth} took the Lease {:?} after {third} stopped",
        stopped_at.elapsed()
    );
    w.scale("web", 35);
    w.wait_ready("web", 35, Duration::from_secs(240));
    let live = w.wait_consistent(Duration::from_secs(60));
    // Nothing was launched twice: every instance ever launched belongs to a
    // NodeClaim dovetail created, and none was launched for nothing.
    let created = succeeded(&w.dovetail_requests(), "create", "nodeclaims", None).len();
    let launched = w.instances().len();
    assert_eq!(
        launched, created,
        "{launched} instances for {created} NodeClaims"
    );
    assert!(!live.is_empty());
}

/// kube-apiserver, then etcd, killed and restarted while pods are pending:
/// the controllers' watches resume, the pods run, nothing is launched twice.
#[test]
fn the_controller_resumes_after_the_api_server_and_etcd_restart() {
    let mut w = World::new("restart", false);
    w.start_controller("a", &[]);
    w.start_controller("b", &[]);
    w.deployment("web", 10, "500m", "");
    w.wait_ready("web", 10, Duration::from_secs(180));
    w.scale("web", 20);
    w.tb.control("kill", "kube-apiserver");
    std::thread::sleep(Duration::from_secs(10));
    w.tb.control("start", "kube-apiserver");
    w.wait_ready("web", 20, Duration::from_secs(240));
    w.wait_consistent(Duration::from_secs(60));

    w.scale("web", 30);
    w.tb.control("kill", "etcd");
    std::thread::sleep(Duration::from_secs(10));
    w.tb.control("start", "etcd");
    // KWOK, the testbed's kubelets, once left a pod bound while etcd was
    // down Pending for good (its watch missed the binding; a kubelet
    // relists). Restarted once the API server serves again, it lists every
    // pod: what is checked here is dovetail, not the stand-in kubelet.
    w.tb.wait_for("the API server ready", Duration::from_secs(60), || {
        w.tb.kubectl(&["get", "--raw", "/readyz"]).status.success()
    });
    w.tb.control("stop", "kwok");
    w.tb.control("start", "kwok");
    w.wait_ready("web", 30, Duration::from_secs(300));
    w.wait_consistent(Duration::from_secs(60));
    let created = succeeded(&w.dovetail_requests(), "create", "nodeclaims", None).len();
    let launched = w.instances().len();
    assert_eq!(
        launched,
        created,
        "{launched} instances for {created} NodeClaims\n{}",
        w.logs()
    );
}

/// `dovetail sync` on its own (the sync-only install) applies a committed
/// NodeOverlay once, not again on every poll, and prunes it when its file
/// goes: it watches the kinds whose CRDs the cluster serves.
#[test]
fn the_standalone_sync_applies_a_node_overlay_once_and_prunes_it() {
    let tb = Testbed::up(&Options::default());
    tb.kubectl_ok(&[
        "apply",
        "--server-side",
        "-f",
        root().join("crds").to_str().expect("UTF-8"),
    ]);
    let repo = tb.dir.path().join("repo");
    std::fs::create_dir_all(&repo).expect("repo");
    git(&repo, &["init", "-q", "-b", "main"]);
    let overlay = "apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: prefer-large}
spec:
  requirements: [{key: karpenter.k8s.aws/instance-size, operator: In, values: [large]}]
  priceAdjustment: \"-5%\"
";
    std::fs::write(repo.join("overlay.yaml"), overlay).expect("write");
    // A revision of no objects at all is refused: the overlay goes with a
    // NodePool and its EC2NodeClass, which stay.
    std::fs::write(repo.join("pool.yaml"), nodepool("default", "")).expect("write");
    let nodeclass = "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  amiSelectorTerms: [{alias: al2023@latest}]
  role: KarpenterNodeRole-sync
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: sync}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: sync}}]
";
    std::fs::write(repo.join("nodeclass.yaml"), nodeclass).expect("write");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "an overlay"]);
    let log = tb.dir.path().join("sync.log");
    let _sync = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_dovetail"))
            .arg("sync")
            .arg(&repo)
            .args(["--ref", "main", "--prune", "--poll-interval", "1s"])
            .env("KUBECONFIG", &tb.kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("dovetail sync starts"),
    );
    let exists = || {
        tb.kubectl(&["get", "nodeoverlay", "prefer-large"])
            .status
            .success()
    };
    // Waits a minute for `done`, and fails with the sync's log.
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(
                Instant::now() < deadline,
                "{what} not in 60 s\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    until("the NodeOverlay applied", &exists);
    // Ten polls later: still one apply (and its dry run).
    std::thread::sleep(Duration::from_secs(10));
    let applies = tb
        .audit()
        .iter()
        .filter(|e| e["verb"] == "patch" && e["objectRef"]["resource"] == "nodeoverlays")
        .filter(|e| {
            !e["requestURI"]
                .as_str()
                .unwrap_or_default()
                .contains("dryRun")
        })
        .count();
    assert_eq!(
        applies,
        1,
        "applied {applies} times\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    std::fs::remove_file(repo.join("overlay.yaml")).expect("remove");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "no overlay"]);
    until("the NodeOverlay pruned", &|| !exists());
}

/// A child process killed when the test ends, however it ends: a process
/// left behind would outlive the test and everything that waits for it.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An instance terminated behind the controller's back (the controller is
/// frozen meanwhile): its kubelet falls silent, the real node lifecycle
/// controller marks its Node not Ready, and the registrar, as the cloud
/// node lifecycle controller, deletes it; the controller's finalizer holds
/// the Node until the controller, thawed, finishes it, replaces the
/// capacity, and the pod runs again.
#[test]
fn a_node_whose_instance_is_terminated_goes_not_ready_and_is_removed() {
    let mut w = World::new("terminated", false);
    w.start_controller("a", &[]);
    w.deployment("web", 1, "500m", "");
    w.wait_ready("web", 1, Duration::from_secs(120));
    let ids = w.wait_consistent(Duration::from_secs(60));
    let id = ids.first().expect("one instance").clone();
    let node = w.tb.items(&["nodes"])[0]["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    w.controller("a").signal("-STOP");
    w.rt.block_on(async {
        w.env
            .ec2
            .terminate_instances()
            .instance_ids(&id)
            .send()
            .await
            .expect("TerminateInstances")
    });
    let ready = |w: &World| -> Option<String> {
        let out = w.tb.kubectl(&[
            "get",
            "node",
            &node,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    eventually("the Node not Ready", &w, Duration::from_secs(120), || {
        ready(&w).filter(|s| s != "True").map(drop)
    });
    // Deleted as the cloud node lifecycle controller deletes it; the
    // controller's termination finalizer holds it until the controller runs.
    let deleting = |w: &World| {
        let out = w.tb.kubectl(&[
            "get",
            "node",
            &node,
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ]);
        !String::from_utf8_lossy(&out.stdout).trim().is_empty()
    };
    eventually("the Node deleted", &w, Duration::from_secs(60), || {
        deleting(&w).then_some(())
    });
    w.controller("a").signal("-CONT");
    eventually("the Node gone", &w, Duration::from_secs(120), || {
        ready(&w).is_none().then_some(())
    });
    w.wait_ready("web", 1, Duration::from_secs(180));
    let now = w.wait_consistent(Duration::from_secs(120));
    assert!(!now.contains(&id), "{id} was terminated");
}

/// AWS's "EC2 Spot Instance Interruption Warning" through moto's SQS, for a
/// node holding six pods behind a PodDisruptionBudget that allows one
/// disruption: the node is drained well within the two-minute notice, each
/// refused eviction being retried per pod from 100 ms, doubling to 10 s, as
/// Karpenter's eviction queue retries it. Prints the drain time and the
/// evictions as the API server saw them, for BENCHMARKS.md.
#[test]
fn a_spot_interruption_drains_six_pods_behind_a_budget_of_one_within_the_notice() {
    let mut w = World::new("drain", false);
    let queue_url = w.interruption_queue();
    w.start_controller("a", &[]);
    w.budget("six", 1);
    w.deployment("six", 6, "250m", "");
    w.wait_ready("six", 6, Duration::from_secs(180));
    let ids: Vec<String> = w
        .wait_consistent(Duration::from_secs(60))
        .into_iter()
        .collect();
    assert_eq!(ids.len(), 1, "six pods of 250m fit one node: {ids:?}");
    let node = w.tb.items(&["nodes"])[0]["metadata"]["name"]
        .as_str()
        .expect("a node name")
        .to_string();
    let on_node = || -> usize {
        w.pods("six")
            .iter()
            .filter(|p| p["spec"]["nodeName"] == node.as_str())
            .count()
    };
    assert_eq!(on_node(), 6);
    let body =
        std::fs::read_to_string(root().join("tests/fixtures/interruption/spot-interruption.json"))
            .expect("a sample event")
            .replace("i-1234567890abcdef0", &ids[0]);
    let endpoint = w.moto.endpoint();
    w.rt.block_on(async {
        crate::moto::sqs_client(&endpoint, REGION)
            .await
            .send_message()
            .queue_url(&queue_url)
            .message_body(&body)
            .send()
            .await
            .expect("SendMessage");
    });
    let sent = Instant::now();
    // Drained: none of the six is left on the node (an evicted pod is
    // terminating, and its replacement runs elsewhere).
    let drained = eventually("the node drained", &w, Duration::from_secs(300), || {
        (on_node() == 0).then(|| sent.elapsed())
    });
    // Released: the node is gone (its instance terminated once nothing
    // was left to wait for).
    let gone = eventually("the node released", &w, Duration::from_secs(300), || {
        w.tb.items(&["nodes"])
            .iter()
            .all(|n| n["metadata"]["name"] != node.as_str())
            .then(|| sent.elapsed())
    });
    w.wait_ready("six", 6, Duration::from_secs(120));
    eventually("the instance gone", &w, Duration::from_secs(120), || {
        (!w.fleet()[2].contains(&ids[0])).then_some(())
    });
    let now = w.wait_consistent(Duration::from_secs(120));
    // The evictions as the API server saw them: pod, answer, time.
    let evictions: Vec<String> = w
        .dovetail_requests()
        .iter()
        .filter(|e| e["objectRef"]["subresource"] == "eviction" && e["stage"] == "ResponseComplete")
        .map(|e| {
            format!(
                "{} {} {}",
                e["stageTimestamp"].as_str().unwrap_or_default(),
                e["objectRef"]["name"].as_str().unwrap_or_default(),
                e["responseStatus"]["code"]
            )
        })
        .collect();
    eprintln!("evictions:\n{}", evictions.join("\n"));
    let accepted = evictions.iter().filter(|e| e.ends_with(" 201")).count();
    eprintln!(
        "spot interruption: six pods behind a budget of one evicted within {:.1} s; the node released after {:.1} s",
        drained.as_secs_f64(),
        gone.as_secs_f64()
    );
    assert!(!now.contains(&ids[0]), "{} still runs", ids[0]);
    assert!(
        accepted >= 6,
        "six pods were evicted, not deleted otherwise: {evictions:?}"
    );
    assert!(
        gone < Duration::from_secs(120),
        "the drain took {drained:?} and the node went after {gone:?}, past the two-minute notice\n{}",
        w.logs()
    );
}

/// Karpenter's `awaitVolumeDetachment` on the real API server: a
/// VolumeAttachment on a node (created here, as the attach-detach
/// controller would) holds the node's termination after its drain, with
/// `VolumesDetached=Unknown` on the NodeClaim and an Event on the Node, the
/// instance still running; once the attachment is deleted, the instance
/// is terminated and the Node and NodeClaim go. The controller reads the
/// attachments through its cache under the installed RBAC.
#[test]
fn termination_waits_for_the_nodes_volume_attachments_to_be_deleted() {
    let mut w = World::new("volumes", false);
    w.start_controller("a", &[]);
    w.deployment("web", 1, "500m", "");
    w.wait_ready("web", 1, Duration::from_secs(120));
    w.wait_consistent(Duration::from_secs(60));
    let claim = w.nodeclaims()[0].clone();
    let claim_name = claim["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    let node = claim["status"]["nodeName"]
        .as_str()
        .expect("registered")
        .to_string();
    let instance = claim["status"]["providerID"]
        .as_str()
        .and_then(|p| p.rsplit('/').next())
        .expect("launched")
        .to_string();
    w.tb.apply(&format!(
        "apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {{name: csi-held}}
spec:
  attacher: ebs.csi.aws.com
  nodeName: {node}
  source: {{persistentVolumeName: pv-held}}
"
    ));
    w.tb.kubectl_ok(&["delete", "nodeclaim", &claim_name, "--wait=false"]);
    let volumes_detached = |w: &World| -> Option<(String, String)> {
        let out =
            w.tb.kubectl(&["get", "nodeclaim", &claim_name, "-o", "json"]);
        let claim: Value = serde_json::from_slice(&out.stdout).ok()?;
        let c = claim["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "VolumesDetached")?
            .clone();
        Some((
            c["status"].as_str()?.to_string(),
            c["reason"].as_str()?.to_string(),
        ))
    };
    eventually(
        "VolumesDetached=Unknown (AwaitingVolumeDetachment)",
        &w,
        Duration::from_secs(180),
        || {
            volumes_detached(&w)
                .filter(|(s, r)| s == "Unknown" && r == "AwaitingVolumeDetachment")
                .map(drop)
        },
    );
    eventually(
        "the AwaitingVolumeDetachment Event",
        &w,
        Duration::from_secs(60),
        || {
            w.tb.items(&[
                "events",
                "-A",
                "--field-selector",
                &format!("involvedObject.name={node},reason=AwaitingVolumeDetachment"),
            ])
            .iter()
            .any(|e| e["message"] == "Awaiting deletion of bound volumeattachments (csi-held)")
            .then_some(())
        },
    );
    // Held: the drain is over, the instance still runs.
    std::thread::sleep(Duration::from_secs(10));
    assert!(w.tb.kubectl(&["get", "node", &node]).status.success());
    let running: BTreeSet<String> = w
        .instances()
        .into_iter()
        .filter(|(_, state)| state == "running")
        .map(|(id, _)| id)
        .collect();
    assert!(running.contains(&instance), "{instance} in {running:?}");
    assert!(
        w.pods("web")
            .iter()
            .all(|p| p["spec"]["nodeName"] != node.as_str())
    );

    w.tb.kubectl_ok(&["delete", "volumeattachment", "csi-held"]);
    eventually("the Node gone", &w, Duration::from_secs(120), || {
        (!w.tb.kubectl(&["get", "node", &node]).status.success()).then_some(())
    });
    eventually("the NodeClaim gone", &w, Duration::from_secs(60), || {
        (!w.tb
            .kubectl(&["get", "nodeclaim", &claim_name])
            .status
            .success())
        .then_some(())
    });
    w.wait_ready("web", 1, Duration::from_secs(180));
    let now = w.wait_consistent(Duration::from_secs(120));
    assert!(!now.contains(&instance), "{instance} was terminated");
    w.assert_nothing_forbidden();
}
