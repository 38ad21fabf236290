//! Benchmark: 24 simulated hours of a cluster that grows to 2,000 nodes and
//! 40,000 pods, through the whole controller (`Simulation::run`), in release.
//!
//! The scenario is generated in a temporary directory: one NodePool over
//! 16-vCPU general-purpose types, and 40 Deployments of 1,000 pods (780m,
//! 1.5Gi: twenty to a node) applied one every 30 minutes, with a small
//! DaemonSet on every node.
//!
//! Run: `cargo bench --bench simulate`. Results go in BENCHMARKS.md.
//!
//! `--html` also renders each run's report as `--output json` and as
//! `--output html` do, and times both on the same report: the command with
//! either output is the run plus its rendering. It prints the page's size
//! and, where Chromium is installed, how long headless Chromium takes to
//! open the page (`--dump-dom`, the page's own script run), from the
//! process start and as the page measures itself.

use std::time::Instant;

use dovetail::simulate::driver::Simulation;
use dovetail::simulate::scenario;

/// The binary's allocator and its settings, so the figures are the binary's.
#[path = "../src/allocator.rs"]
mod allocator;

#[path = "common/cluster.rs"]
mod cluster;
use cluster::{CONFIG, DEPLOYMENTS, REPLICAS};

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

/// `--html`: renders the report both ways and times them.
fn html_outputs(report: &dovetail::simulate::report::Report, dir: &std::path::Path, sim: f64) {
    let t = Instant::now();
    let json = report.to_json();
    let json_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let html = dovetail::simulate::html::render(report);
    let html_s = t.elapsed().as_secs_f64();
    let path = dir.join("report.html");
    std::fs::write(&path, &html).unwrap();
    println!(
        "  json: {:.3} s, {:.1} MB; html: {:.3} s, {:.2} MB; run + json {:.1} s, run + html {:.1} s: html/json {:.4}",
        json_s,
        json.len() as f64 / 1e6,
        html_s,
        html.len() as f64 / 1e6,
        sim + json_s,
        sim + html_s,
        (sim + html_s) / (sim + json_s)
    );
    let dirs: Vec<std::path::PathBuf> =
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).collect();
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|n| dirs.iter().map(move |d| d.join(n)))
        .find(|p| p.is_file())
    else {
        println!("  chromium: not installed, the page's opening time is not measured");
        return;
    };
    let profile = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let out = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--proxy-server=http://127.0.0.1:9",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}", path.display()))
        .output()
        .unwrap();
    let open_s = t.elapsed().as_secs_f64();
    let dom = String::from_utf8_lossy(&out.stdout);
    let attr = |name: &str| {
        dom.split(&format!("{name}=\""))
            .nth(1)
            .and_then(|s| s.split('"').next())
            .map(str::to_string)
    };
    println!(
        "  chromium: opened, scripts run and DOM dumped in {open_s:.2} s (process start to exit); the page's script took {} ms; ready: {}",
        attr("data-render-ms").unwrap_or_else(|| "?".into()),
        attr("data-ready").is_some()
    );
}

fn main() {
    // As the `simulate` and `diff --forecast` commands run.
    allocator::keep_freed_memory();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("repo")).unwrap();
    std::fs::write(dir.path().join("repo/config.yaml"), CONFIG).unwrap();
    let runs = arg("--runs", RUNS);
    let html = std::env::args().any(|a| a == "--html");
    let text = cluster::scenario_text(arg("--deployments", DEPLOYMENTS), REPLICAS, 30, "24h");
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
        if html {
            html_outputs(&report, dir.path(), elapsed.as_secs_f64());
        }
    }
    times.sort();
    println!("median of {runs}: {:.1} s", times[runs / 2].as_secs_f64());
}
