//! A realistic workload on the AWS catalog: 50,000 pending pods from a fixed
//! seed on four NodePools.
//!
//! `cargo bench --bench realistic [-- --runs N] [--pods N]`
//!
//! - Catalog: `../shared/data/aws-catalog.json`, next to the crate (1,345 types, on-demand
//!   in three zones). Spot offerings are added in every zone with a
//!   deterministic discount model: spot price = on-demand × (0.30 + 0.40·h),
//!   where h ∈ [0, 1) is an FNV-1a hash of `type/zone`; so spot costs 30–70%
//!   of on-demand and differs by zone, as on EC2.
//! - NodePools: `general` (c/m/r, amd64, spot + on-demand), `arm64`
//!   (c/m/r Graviton, spot + on-demand), `gpu` (NVIDIA types, tainted
//!   `nvidia.com/gpu=true:NoSchedule`), `batch` (c/m spot only, label
//!   `workload=batch`).
//! - Pods come in deployments of 5–60 replicas: a quarter of the pods have a
//!   zone topology spread (maxSkew 1), a tenth hostname anti-affinity to their
//!   own deployment, 1% a GPU, about 10% arm64 and 10% batch node selectors.
//!
//! Each run is a fresh child process, so peak RSS is per solve.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use dovetail::model::catalog::read_catalog;
use dovetail::model::labels::{ARCH, CAPACITY_TYPE, HOSTNAME, ZONE};
use dovetail::model::{
    Effect, InstanceType, LabelSelector, Offering, Requirement, Requirements, Resources, Taint,
    Toleration,
};
use dovetail::scheduling::{
    Namespaces, NodePoolSpec, PodAffinityTerm, PodSpec, SolveInput, SolveOptions, TopologySpread,
    Unsatisfiable, solve,
};

/// The shared catalog, relative to the crate's directory.
const CATALOG: &str = "../shared/data/aws-catalog.json";
const SEED: u64 = 0x0005_eedd_0e7a_1100;

/// xorshift64*: a small fixed-seed generator, enough for a workload.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Adds spot offerings with the documented discount model.
fn with_spot(mut catalog: Vec<InstanceType>) -> Vec<InstanceType> {
    for it in &mut catalog {
        let spot: Vec<Offering> = it
            .offerings
            .iter()
            .filter(|o| o.capacity_type == "on-demand")
            .map(|o| {
                let h = (fnv(&format!("{}/{}", it.name, o.zone)) % 10_000) as f64 / 10_000.0;
                Offering {
                    zone: o.zone.clone(),
                    capacity_type: "spot".into(),
                    price: o.price * (0.30 + 0.40 * h),
                    available: true,
                    reservations: Vec::new(),
                }
            })
            .collect();
        it.offerings.extend(spot);
        it.requirements.0.remove(CAPACITY_TYPE);
        it.requirements
            .add(CAPACITY_TYPE, Requirement::in_values(["on-demand", "spot"]));
    }
    catalog
}

fn req(pairs: &[(&str, Requirement)]) -> Requirements {
    let mut r = Requirements::new();
    for (k, v) in pairs {
        r.add(k, v.clone());
    }
    r
}

fn pools(catalog: &[InstanceType]) -> Vec<NodePoolSpec> {
    let cmr = || Requirement::in_values(["c", "m", "r"]);
    let both = || Requirement::in_values(["spot", "on-demand"]);
    let category = "karpenter.k8s.aws/instance-category";
    let pool = |name: &str, weight: i32, requirements: Requirements| NodePoolSpec {
        name: name.into(),
        weight,
        requirements,
        labels: BTreeMap::new(),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        limits: Resources::new(),
        instance_types: catalog.to_vec(),
    };
    let general = pool(
        "general",
        10,
        req(&[
            (category, cmr()),
            (CAPACITY_TYPE, both()),
            (ARCH, Requirement::in_values(["amd64"])),
        ]),
    );
    let arm = pool(
        "arm64",
        5,
        req(&[
            (category, cmr()),
            (CAPACITY_TYPE, both()),
            (ARCH, Requirement::in_values(["arm64"])),
        ]),
    );
    let mut gpu = pool(
        "gpu",
        0,
        req(&[(
            "karpenter.k8s.aws/instance-gpu-manufacturer",
            Requirement::in_values(["nvidia"]),
        )]),
    );
    gpu.taints
        .push(Taint::new("nvidia.com/gpu", "true", Effect::NoSchedule));
    let mut batch = pool(
        "batch",
        0,
        req(&[
            (category, Requirement::in_values(["c", "m"])),
            (CAPACITY_TYPE, Requirement::in_values(["spot"])),
        ]),
    );
    batch.labels.insert("workload".into(), "batch".into());
    vec![general, arm, gpu, batch]
}

fn selector(app: &str) -> LabelSelector {
    LabelSelector {
        match_labels: [("app".to_string(), app.to_string())].into_iter().collect(),
        match_expressions: Vec::new(),
    }
}

/// Generates `n` pods in deployments.
fn pods(n: usize) -> Vec<PodSpec> {
    let mut rng = Rng(SEED);
    let cpus = [100, 250, 500, 1000, 2000, 4000];
    let mems = [128i64, 256, 512, 1024, 2048, 4096, 8192];
    let mut out = Vec::with_capacity(n);
    let mut d = 0;
    while out.len() < n {
        let replicas = (5 + rng.below(56) as usize).min(n - out.len());
        let app = format!("app-{d:04}");
        let ns = format!("team-{}", d % 17);
        let cpu = cpus[rng.below(cpus.len() as u64) as usize];
        let mem = mems[rng.below(mems.len() as u64) as usize] << 20;
        let kind = rng.below(100);
        let mut template = PodSpec::new(
            &ns,
            "",
            Resources::new().with("cpu", cpu).with("memory", mem),
        );
        std::sync::Arc::make_mut(&mut template.labels).insert("app".into(), app.clone());
        let term = PodAffinityTerm {
            selector: selector(&app),
            namespaces: Namespaces::Names([ns.clone()].into_iter().collect()),
            topology_key: HOSTNAME.into(),
        };
        match kind {
            0..25 => template.spread.push(TopologySpread {
                topology_key: ZONE.into(),
                max_skew: 1,
                min_domains: None,
                when_unsatisfiable: Unsatisfiable::DoNotSchedule,
                selector: selector(&app),
                honor_node_affinity: true,
                honor_node_taints: false,
            }),
            25..35 => template.anti_affinity.push(term),
            35..36 => {
                template.requests.set("nvidia.com/gpu", 1);
                template.tolerations.push(Toleration {
                    key: "nvidia.com/gpu".into(),
                    operator: dovetail::model::taints::TolerationOp::Exists,
                    value: String::new(),
                    effect: None,
                });
            }
            36..46 => template
                .node_selector
                .add(ARCH, Requirement::in_values(["arm64"])),
            46..56 => template
                .node_selector
                .add("workload", Requirement::in_values(["batch"])),
            _ => {}
        }
        for r in 0..replicas {
            let mut p = template.clone();
            p.name = format!("{app}-{r:03}");
            p.created_ms = out.len() as i64;
            out.push(p);
        }
        d += 1;
    }
    out
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn one(n: usize) -> Result<(), String> {
    let catalog = with_spot(
        read_catalog(&Path::new(env!("CARGO_MANIFEST_DIR")).join(CATALOG))
            .map_err(|e| e.to_string())?,
    );
    let input = SolveInput {
        nodes: Vec::new(),
        pods: pods(n).into_iter().map(std::sync::Arc::new).collect(),
        nodepools: pools(&catalog),
        daemonsets: Vec::new(),
    };
    let start = Instant::now();
    let r = solve(&input, &SolveOptions::default()).map_err(|e| e.to_string())?;
    let secs = start.elapsed().as_secs_f64();
    let mut per_pool: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &r.nodeclaims {
        *per_pool.entry(c.nodepool.as_str()).or_default() += 1;
    }
    if std::env::var_os("DUMP").is_some() {
        for c in &r.nodeclaims {
            eprintln!(
                "{} {:.4} {} {:?} {:?} {}",
                c.nodepool,
                c.price,
                c.pods.len(),
                c.requests.to_strings(),
                c.zones,
                c.instance_types
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(",")
            );
        }
    }
    if std::env::var_os("REASONS").is_some() {
        for u in r.unschedulable.iter().take(5) {
            eprintln!("{}: {}", u.pod, u.reason);
        }
    }
    println!(
        "{secs} {} {} {} {} {} {:?}",
        r.nodeclaims.len(),
        r.price,
        r.lower_bound,
        r.unschedulable.len(),
        peak_rss_mb(),
        per_pool
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<usize>().ok())
    };
    let n = arg("--pods").unwrap_or(50_000);
    if args.iter().any(|a| a == "--one") {
        if let Err(e) = one(n) {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
        return;
    }
    let runs = arg("--runs").unwrap_or(5);
    let exe = std::env::current_exe().expect("bench binary path");
    let mut times = Vec::new();
    let mut last = String::new();
    let mut rss: f64 = 0.0;
    for _ in 0..runs {
        let out = Command::new(&exe)
            .args(["--one", "--pods", &n.to_string()])
            .output()
            .expect("run child");
        if !out.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&out.stderr));
            std::process::exit(1);
        }
        last = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let f: Vec<&str> = last.split(' ').collect();
        times.push(f[0].parse::<f64>().unwrap_or(f64::NAN));
        rss = rss.max(f[5].parse().unwrap_or(0.0));
    }
    times.sort_by(f64::total_cmp);
    let f: Vec<&str> = last.splitn(7, ' ').collect();
    let price: f64 = f[2].parse().unwrap_or(0.0);
    let lb: f64 = f[3].parse().unwrap_or(0.0);
    println!(
        "| pods | solve (median of {runs}) | pods/s | NodeClaims | price $/h | lower bound | price/LB | unschedulable | peak RSS | per pool |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let median = times[times.len() / 2];
    println!(
        "| {n} | {median:.3} s | {:.0} | {} | {price:.2} | {lb:.2} | {:.3} | {} | {rss:.0} MB | {} |",
        n as f64 / median,
        f[1],
        price / lb.max(1e-9),
        f[4],
        f[6]
    );
}
