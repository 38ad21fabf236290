//! Benchmark: 24 simulated hours of a cluster that grows to 2,000 nodes and
//! 40,000 pods, through the whole controller (`Simulation::run`), in release.
//!
//! The scenario is generated in a temporary directory: one NodePool over
//! 16-vCPU general-purpose types, and 40 Deployments of 1,000 pods (780m,
//! 1.5Gi: twenty to a node) applied one every 30 minutes, with a small
//! DaemonSet on every node.
//!
//! Run: `cargo bench --bench simulate`. Results go in BENCHMARKS.md.

use std::fmt::Write as _;
use std::time::Instant;

use dovetail::simulate::driver::Simulation;
use dovetail::simulate::scenario;

/// The binary's allocator, so the figure is the command's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DEPLOYMENTS: usize = 40;
const REPLICAS: usize = 1_000;
const RUNS: usize = 3;

/// `--deployments N` and `--runs N` shrink the workload for profiling.
fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const CONFIG: &str = r#"apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiSelectorTerms:
    - alias: al2023@latest
  role: KarpenterNodeRole-bench
  subnetSelectorTerms:
    - tags: {karpenter.sh/discovery: bench}
  securityGroupSelectorTerms:
    - tags: {karpenter.sh/discovery: bench}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: general
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - key: karpenter.k8s.aws/instance-cpu
          operator: In
          values: ["16"]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["m", "c", "r"]
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64"]
  limits:
    cpu: "100000"
"#;

fn scenario_text(deployments: usize) -> String {
    let mut s = String::from("config: repo\ntimeline:\n  - at: 0s\n    apply:\n");
    s.push_str(
        "      - {apiVersion: apps/v1, kind: DaemonSet, metadata: {name: agent, namespace: kube-system}, spec: {selector: {matchLabels: {app: agent}}, template: {metadata: {labels: {app: agent}}, spec: {tolerations: [{operator: Exists}], containers: [{name: a, image: i, resources: {requests: {cpu: 100m, memory: 128Mi}}}]}}}}\n",
    );
    for d in 0..deployments {
        let minutes = d * 30;
        let _ = writeln!(
            s,
            "  - at: {minutes}m\n    apply:\n      - {{apiVersion: apps/v1, kind: Deployment, metadata: {{name: app-{d:02}, namespace: default}}, spec: {{replicas: {REPLICAS}, selector: {{matchLabels: {{app: app-{d:02}}}}}, template: {{metadata: {{labels: {{app: app-{d:02}}}}}, spec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: 780m, memory: 1536Mi}}}}}}]}}}}}}}}"
        );
    }
    s.push_str("until: 24h\n");
    s
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("repo")).unwrap();
    std::fs::write(dir.path().join("repo/config.yaml"), CONFIG).unwrap();
    let runs = arg("--runs", RUNS);
    let text = scenario_text(arg("--deployments", DEPLOYMENTS));
    let mut times = Vec::new();
    for run in 0..runs {
        let sc = scenario::parse("bench.yaml", dir.path(), text.as_bytes()).unwrap();
        let t = Instant::now();
        let report = Simulation::new(sc, None).unwrap().run(None).unwrap();
        let elapsed = t.elapsed();
        times.push(elapsed);
        let s = &report.summary;
        let bound = report.pods.iter().filter(|p| p.node.is_some()).count();
        println!(
            "run {run}: {:.1} s wall; {} nodes launched, {} pods ({} bound), {} unschedulable, p99 pending {:.0} s, fleet ${:.2}/h, cost ${:.2}",
            elapsed.as_secs_f64(),
            s.nodes_launched,
            s.pods_created,
            bound,
            report.unschedulable.len(),
            s.p99_pending_seconds,
            s.price_per_hour,
            s.cost_usd
        );
    }
    times.sort();
    println!("median of {runs}: {:.1} s", times[runs / 2].as_secs_f64());
}
