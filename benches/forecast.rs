//! Benchmark: `dovetail diff --forecast` over 24 hours from a snapshot of
//! 2,000 nodes and 40,000 pods, both sides (run in parallel), in release.
//!
//! Setup (not timed): the simulate benchmark's cluster (`common/cluster.rs`)
//! with its 40 Deployments applied a minute apart and left to settle for
//! two hours, written as a snapshot with `simulate --snapshot-out`'s code;
//! and a git repository whose head pins the node class's AMI
//! (`al2023@latest` -> `al2023@v20250601`), which drifts every node, and
//! one that lowers the NodePool's cpu limit below its usage.
//! Timed: the whole command in-process, as `dovetail diff --forecast
//! --snapshot FILE --for 24h -o json` runs it (reading the snapshot, both
//! simulations, the comparison): an identical A and B, the limit with a
//! Deployment scaled up at 2 h, and the pinned AMI for `--pin-for`
//! (default 1h; `24h` for the whole rollout, paced by the NodePool's
//! default budget of 10%).
//!
//! Run: `cargo bench --bench forecast` (`--deployments N`, `--runs N`,
//! `--pin-for DURATION`, `--keep DIR` to keep the inputs, e.g. for
//! `farm-bench`). Results go in
//! BENCHMARKS.md.

use std::path::Path;
use std::time::Instant;

use dovetail::simulate::driver::Simulation;
use dovetail::simulate::scenario;

#[path = "common/cluster.rs"]
mod cluster;
use cluster::{CONFIG, DEPLOYMENTS, REPLICAS};

/// The binary's allocator and its settings, so the figures are the binary's.
#[path = "../src/allocator.rs"]
mod allocator;

const RUNS: usize = 3;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// Commits `config` as `config/config.yaml` on HEAD of the repository at `dir`.
fn commit(repo: &git2::Repository, dir: &Path, config: &str, message: &str) {
    std::fs::create_dir_all(dir.join("config")).unwrap();
    std::fs::write(dir.join("config/config.yaml"), config).unwrap();
    let mut index = repo.index().unwrap();
    index
        .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
        .unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::new(
        "bench",
        "bench@example.com",
        &git2::Time::new(1_767_571_200, 0),
    )
    .unwrap();
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<_> = parent.iter().collect();
    repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)
        .unwrap();
}

/// `dovetail ARGS` in-process: exit code, stdout.
fn dovetail(args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = {
        let mut io = dovetail::cli::Io {
            out: &mut out,
            err: &mut err,
            out_is_terminal: false,
            err_is_terminal: false,
        };
        dovetail::cli::run_args(
            std::iter::once("dovetail").chain(args.iter().copied()),
            &mut io,
        )
    };
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn main() {
    // As the `simulate` and `diff --forecast` commands run.
    allocator::keep_freed_memory();
    let tmp = tempfile::tempdir().unwrap();
    let dir = arg("--keep").map_or_else(|| tmp.path().to_path_buf(), Into::into);
    let deployments = arg("--deployments")
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEPLOYMENTS);
    let runs = arg("--runs").and_then(|v| v.parse().ok()).unwrap_or(RUNS);
    std::fs::create_dir_all(dir.join("repo")).unwrap();
    std::fs::write(dir.join("repo/config.yaml"), CONFIG).unwrap();

    let t = Instant::now();
    let text = cluster::scenario_text(deployments, REPLICAS, 1, "2h");
    let sc = scenario::parse("cluster.yaml", &dir, text.as_bytes()).unwrap();
    let sim = Simulation::new(sc, None).unwrap();
    let state = sim.cluster();
    let report = sim.run(None).unwrap();
    let snapshot = dovetail::simulate::snapshot::snapshot(&state);
    let snap = dir.join("snapshot.json");
    std::fs::write(&snap, serde_json::to_vec(&snapshot).unwrap()).unwrap();
    println!(
        "setup: {:.1} s; snapshot of {} nodes, {} pods bound, {:.0} MB",
        t.elapsed().as_secs_f64(),
        report
            .nodes
            .iter()
            .filter(|n| n.deleted_at.is_none())
            .count(),
        report
            .pods
            .iter()
            .filter(|p| p.node.is_some() && p.deleted_at.is_none())
            .count(),
        std::fs::metadata(&snap).unwrap().len() as f64 / 1e6
    );

    // One repository per change: its base is the cluster's configuration.
    let repo_of = |name: &str, change: &str| {
        let repo_dir = dir.join(name);
        let repo = git2::Repository::init(&repo_dir).unwrap();
        commit(&repo, &repo_dir, CONFIG, "base");
        commit(&repo, &repo_dir, change, name);
        repo_dir.join("config").to_str().unwrap().to_string()
    };
    let pinned = repo_of("pin", &CONFIG.replace("al2023@latest", "al2023@v20250601"));
    let limited = repo_of(
        "limit",
        &CONFIG.replace("cpu: \"100000\"", "cpu: \"30000\""),
    );
    let snap = snap.to_str().unwrap();
    let pin_window = arg("--pin-for").unwrap_or_else(|| "1h".into());
    let cases: [(&str, &str, &str, &str, &[&str]); 3] = [
        ("identical A and B", &pinned, "HEAD~1", "24h", &[]),
        (
            "NodePool cpu limit below usage, and a Deployment scaled by 500 at 2h",
            &limited,
            "HEAD",
            "24h",
            &["--scale", "deployment/default/app-00=1500@2h"],
        ),
        (
            "pinned AMI: every node drifts, 10% at a time",
            &pinned,
            "HEAD",
            &pin_window,
            &[],
        ),
    ];
    for (what, config, to, window, extra) in cases {
        let mut args = vec![
            "diff",
            config,
            "--from",
            "HEAD~1",
            "--to",
            to,
            "--forecast",
            "--snapshot",
            snap,
            "--for",
            window,
            "-o",
            "json",
        ];
        args.extend_from_slice(extra);
        println!("{what}: dovetail {}", args.join(" "));
        let mut times = Vec::new();
        for run in 0..runs {
            let t = Instant::now();
            let (code, out, err) = dovetail(&args);
            let elapsed = t.elapsed().as_secs_f64();
            times.push(elapsed);
            assert!(code <= 1, "{err}");
            let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
            let f = &doc["forecast"];
            let side = |s: &serde_json::Value| {
                format!(
                    "{} launched, {} disrupted, last drift gone at {:.0} s, p99 wait {:.0} s, ${:.2}/h, cost ${:.2}",
                    s["nodes_launched"],
                    s["disruptions"].as_array().map_or(0, |d| d
                        .iter()
                        .map(|d| d["nodes"].as_u64().unwrap_or(0))
                        .sum::<u64>()),
                    s["last_drift_replaced_seconds"].as_f64().unwrap_or(0.0),
                    s["p99_pending_seconds"].as_f64().unwrap_or(0.0),
                    s["price_per_hour"].as_f64().unwrap_or(0.0),
                    s["cost_usd"].as_f64().unwrap_or(0.0),
                )
            };
            println!(
                "  run {run}: {elapsed:.1} s wall, exit {code}; A: {}; B: {}",
                side(&f["a"]),
                side(&f["b"])
            );
        }
        times.sort_by(f64::total_cmp);
        if let Some(median) = times.get(runs / 2) {
            println!("  median of {runs}: {median:.1} s");
        }
    }
}
