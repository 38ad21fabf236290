//! Benchmark: consolidation passes over large clusters, through the same
//! pure decision code the controller calls (`disruption::decide` over a
//! `scheduling::removal::Removals` prepared on the cluster).
//!
//! `cargo bench --bench consolidation [-- --runs N]`
//!
//! - **anti-affine**: 1,000 nodes (m5.2xlarge, on-demand, three zones),
//!   each holding two pods of two hostname anti-affine groups (one of each
//!   per node, the case that made the reference evaluate 37–49 candidates
//!   per 3-minute budget) plus filler pods, at about 60% of cpu. Every
//!   candidate is evaluated by single-node consolidation (multi-node finds
//!   no set whose anti-affine pods fit elsewhere).
//! - **multi-node**: 5,000 nodes (m5.2xlarge) at about 25% of cpu with
//!   free-moving pods; multi-node consolidation binary-searches the largest
//!   set of candidates that can go together.
//!
//! Each case prints the pass time (preparing the removals and deciding),
//! the trials and candidates evaluated, the decision, and the fleet price
//! before and after against the lower bound of the remaining workload.
//!
//! The catalog is the shared AWS catalog (on-demand), resolved from the
//! crate root (`../shared/data/aws-catalog.json`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use dovetail::disruption::{Allowed, Candidate, Options, Pass, Reason, decide};
use dovetail::model::catalog::read_catalog;
use dovetail::model::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODEPOOL, ZONE};
use dovetail::model::{InstanceType, LabelSelector, Requirement, Requirements, Resources};
use dovetail::scheduling::removal::Removals;
use dovetail::scheduling::types::{BoundPod, ExistingNode};
use dovetail::scheduling::{
    Namespaces, NodePoolSpec, PodAffinityTerm, PodSpec, Preferences, SolveInput, SolveOptions,
    solve,
};

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
const NODE_TYPE: &str = "m5.2xlarge";

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn catalog() -> Vec<InstanceType> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/aws-catalog.json");
    read_catalog(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One NodePool: amd64 c/m/r, on-demand.
fn pool(catalog: &[InstanceType]) -> NodePoolSpec {
    let mut requirements = Requirements::new();
    requirements.add(CAPACITY_TYPE, Requirement::in_values(["on-demand"]));
    requirements.add("kubernetes.io/arch", Requirement::in_values(["amd64"]));
    requirements.add(
        "karpenter.k8s.aws/instance-category",
        Requirement::in_values(["c", "m", "r"]),
    );
    NodePoolSpec {
        name: "general".into(),
        weight: 0,
        requirements,
        labels: BTreeMap::new(),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        limits: Resources::new(),
        instance_types: catalog.to_vec(),
    }
}

fn anti(app: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        selector: LabelSelector {
            match_labels: BTreeMap::from([("app".to_string(), app.to_string())]),
            match_expressions: Vec::new(),
        },
        namespaces: Namespaces::Names(["default".to_string()].into()),
        topology_key: HOSTNAME.into(),
    }
}

struct Cluster {
    input: SolveInput,
    homes: Vec<String>,
    candidates: Vec<Candidate>,
}

/// `nodes` m5.2xlarge nodes, each with the pods `per_node(i)` returns.
fn cluster(
    catalog: &[InstanceType],
    nodes: usize,
    per_node: impl Fn(usize) -> Vec<PodSpec>,
) -> Cluster {
    let it = catalog
        .iter()
        .find(|t| t.name == NODE_TYPE)
        .expect("m5.2xlarge is in the catalog");
    let price = it.offerings[0].price;
    let mut input = SolveInput {
        nodepools: vec![pool(catalog)],
        ..SolveInput::default()
    };
    let mut homes = Vec::new();
    let mut candidates = Vec::new();
    for i in 0..nodes {
        let name = format!("node-{i:05}");
        let zone = ZONES[i % 3];
        let labels: BTreeMap<String, String> = [
            (HOSTNAME, name.as_str()),
            (ZONE, zone),
            (NODEPOOL, "general"),
            (CAPACITY_TYPE, "on-demand"),
            (INSTANCE_TYPE, NODE_TYPE),
            ("kubernetes.io/arch", "amd64"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let pods = per_node(i);
        let bound = pods
            .iter()
            .map(|p| {
                Arc::new(BoundPod::new(
                    p.namespace.clone(),
                    p.name.clone(),
                    p.labels.as_ref().clone(),
                    p.requests.clone(),
                    Vec::new(),
                    p.anti_affinity.clone(),
                ))
            })
            .collect();
        candidates.push(Candidate {
            node: name.as_str().into(),
            nodeclaim: format!("claim-{i:05}").into(),
            nodepool: "general".into(),
            instance_type: NODE_TYPE.into(),
            zone: zone.into(),
            capacity_type: "on-demand".into(),
            price,
            pods: pods.len(),
            disruption_cost: pods.len() as f64,
            drift: Vec::new(),
            consolidatable: true,
            underutilized: true,
            blocked: None,
            pods_blocked: None,
            termination_grace_period: false,
            static_pool: false,
            buffer_pods: 0,
        });
        for p in pods {
            homes.push(name.clone());
            input.pods.push(std::sync::Arc::new(p));
        }
        input.nodes.push(std::sync::Arc::new(ExistingNode {
            name,
            nodepool: Some("general".into()),
            labels: std::sync::Arc::new(labels),
            taints: Vec::new(),
            initialized: true,
            allocatable: it.allocatable.clone(),
            capacity: it.capacity.clone(),
            pods: bound,
            price: Some(price),
            keys: dovetail::scheduling::types::NodeKeys::default(),
        }));
    }
    Cluster {
        input,
        homes,
        candidates,
    }
}

fn pod(name: String, app: &str, cpu_m: i64, mem_mi: i64) -> PodSpec {
    let mut p = PodSpec::new(
        "default",
        &name,
        Resources::new()
            .with("cpu", cpu_m)
            .with("memory", mem_mi << 20)
            .with("pods", 1),
    );
    std::sync::Arc::make_mut(&mut p.labels).insert("app".into(), app.into());
    p
}

fn opts() -> SolveOptions {
    SolveOptions {
        preferences: Preferences::Respect,
        now_ms: 0,
    }
}

/// The lower bound of the price of capacity for every pod of the cluster,
/// as if it were empty.
fn lower_bound(c: &Cluster) -> f64 {
    let input = SolveInput {
        nodes: Vec::new(),
        pods: c.input.pods.clone(),
        nodepools: c.input.nodepools.clone(),
        daemonsets: Vec::new(),
    };
    solve(&input, &opts()).map_or(0.0, |r| r.lower_bound)
}

struct Run {
    seconds: f64,
    trials: usize,
    evaluated: usize,
    summary: String,
    saving: f64,
}

fn pass(c: &Cluster) -> Run {
    let t = Instant::now();
    let homes: Vec<&str> = c.homes.iter().map(String::as_str).collect();
    let mut removals = Removals::new(&c.input, &homes, &opts()).expect("prepares");
    let unbounded: BTreeMap<String, Allowed> = BTreeMap::from([(
        "general".to_string(),
        Allowed {
            total: c.candidates.len(),
            disrupting: 0,
            limit: Reason::VOLUNTARY.iter().map(|r| (*r, None)).collect(),
            scheduled: Default::default(),
        },
    )]);
    let out = decide(
        &Pass {
            candidates: &c.candidates,
            budgets: unbounded,
            consolidation: true,
            pools: &c.input.nodepools,
            options: Options::default(),
            uninitialized: Default::default(),
            statics: Default::default(),
            prepared: None,
        },
        &mut removals,
    );
    let seconds = t.elapsed().as_secs_f64();
    let (summary, saving) = match &out.command {
        Some(cmd) => (
            format!(
                "{:?} {} of {} node(s), {} replacement(s)",
                cmd.method,
                cmd.decision(),
                cmd.candidates.len(),
                cmd.replacements.len()
            ),
            cmd.savings,
        ),
        None => ("no consolidation".into(), 0.0),
    };
    Run {
        seconds,
        trials: out.trials,
        evaluated: out.evaluated,
        summary,
        saving,
    }
}

fn report(name: &str, c: &Cluster, runs: usize) {
    let fleet: f64 = c.candidates.iter().map(|x| x.price).sum();
    let bound = lower_bound(c);
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let r = pass(c);
        times.push(r.seconds);
        last = Some(r);
    }
    times.sort_by(f64::total_cmp);
    let r = last.expect("at least one run");
    println!(
        "{name}: {} nodes, {} pods: pass median {:.3} s (min {:.3}, max {:.3}) over {runs} runs; {} candidates evaluated, {} trials; {}",
        c.candidates.len(),
        c.input.pods.len(),
        times[runs / 2],
        times[0],
        times[runs - 1],
        r.evaluated,
        r.trials,
        r.summary,
    );
    println!(
        "{name}: fleet {:.2}/h before, {:.2}/h after (saving {:.2}/h); lower bound of the workload {:.2}/h: ratio {:.2} before, {:.2} after",
        fleet,
        fleet - r.saving,
        r.saving,
        bound,
        fleet / bound,
        (fleet - r.saving) / bound,
    );
}

fn main() {
    let runs = arg("--runs", 3).max(1);
    let catalog = catalog();
    // 1,000 nodes: one pod of each anti-affine group (1 cpu, 2Gi each) and
    // three filler pods (0.9 cpu, 2Gi each) per node: 4.7 of 8 cpu.
    let anti_affine = cluster(&catalog, arg("--nodes", 1000), |i| {
        let mut a = pod(format!("a-{i:05}"), "a", 1000, 2048);
        a.anti_affinity.push(anti("a"));
        let mut b = pod(format!("b-{i:05}"), "b", 1000, 2048);
        b.anti_affinity.push(anti("b"));
        let mut pods = vec![a, b];
        for k in 0..3 {
            pods.push(pod(format!("filler-{i:05}-{k}"), "filler", 900, 2048));
        }
        pods
    });
    report("anti-affine", &anti_affine, runs);
    // 5,000 nodes at 2 cpu of 8: pods that can go anywhere.
    let multi = cluster(&catalog, arg("--multi-nodes", 5000), |i| {
        (0..2)
            .map(|k| pod(format!("web-{i:05}-{k}"), "web", 1000, 3072))
            .collect()
    });
    report("multi-node", &multi, runs);
}
