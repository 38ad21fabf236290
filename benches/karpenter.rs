//! The reference autoscaler's scheduling benchmark on dovetail.
//!
//! `cargo bench --bench karpenter [-- FILTER] [--runs N]`
//!
//! Each pod file is solved in a fresh child process (so peak memory is per
//! file) `--runs` times; the median solve time is reported with pods/s,
//! NodeClaims, price, price over the README's lower bound, and peak RSS.

use std::path::{Path, PathBuf};
use std::process::Command;

use dovetail::plan::{PlanOptions, run};
use dovetail::scheduling::Preferences;

/// The reference workload, relative to the crate's directory.
const DIR: &str = "../shared/bench/karpenter-scheduling";

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(DIR)
}

/// The README's lower bound for each diverse file.
fn readme_lb(file: &str) -> Option<f64> {
    Some(match file {
        "pods-diverse-1000.jsonl" => 215.08,
        "pods-diverse-2000.jsonl" => 427.90,
        "pods-diverse-5000.jsonl" => 1072.98,
        "pods-diverse-10000.jsonl" => 2149.40,
        "pods-diverse-20000.jsonl" => 4343.48,
        _ => return None,
    })
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

fn one(file: &Path, prefs: Preferences) -> Result<(), String> {
    let opts = PlanOptions {
        config: dir(),
        catalog: dir().join("instance-types.json"),
        pods: file.to_path_buf(),
        snapshot: None,
        preferences: prefs,
        now_ms: 0,
    };
    let r = run(&opts).map_err(|e| e.to_string())?;
    if std::env::var_os("DUMP").is_some() {
        for c in &r.nodeclaims {
            eprintln!(
                "{} {} {:?} {}",
                c.price_per_hour,
                c.pods.len(),
                c.requests,
                c.instance_types.first().cloned().unwrap_or_default()
            );
        }
    }
    let pods: usize = r.nodeclaims.iter().map(|c| c.pods.len()).sum();
    let zones: std::collections::BTreeSet<&str> = r
        .nodeclaims
        .iter()
        .filter(|c| c.zones.len() == 1)
        .map(|c| c.zones[0].as_str())
        .collect();
    println!(
        "{} {} {} {} {} {} {} {}",
        r.solve_seconds,
        pods,
        r.nodeclaim_count,
        r.price_per_hour,
        r.lower_bound_price_per_hour,
        r.unschedulable.len(),
        peak_rss_mb(),
        zones.into_iter().collect::<Vec<_>>().join(",")
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--one") {
        let file = PathBuf::from(&args[i + 1]);
        let prefs = if args.iter().any(|a| a == "--ignore") {
            Preferences::Ignore
        } else {
            Preferences::Respect
        };
        if let Err(e) = one(&file, prefs) {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
        return;
    }
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(5);
    let filter = args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with("--") && a.parse::<usize>().is_err())
        .cloned()
        .unwrap_or_default();
    let mut cases: Vec<(String, bool)> = [1, 50, 100, 500, 1000, 1500, 2000, 5000, 10000, 20000]
        .iter()
        .map(|n| (format!("pods-diverse-{n}.jsonl"), false))
        .collect();
    cases.push(("pods-preference-4000.jsonl".into(), false));
    cases.push(("pods-preference-4000.jsonl".into(), true));
    let exe = std::env::current_exe().expect("bench binary path");
    println!(
        "| file | prefs | solve (median) | pods/s | NodeClaims | price | LB (solver) | price/README LB | unschedulable | peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (file, ignore) in cases {
        if !file.contains(&filter) {
            continue;
        }
        let path = dir().join(&file);
        let mut times = Vec::new();
        let mut last: Vec<String> = Vec::new();
        let mut rss: f64 = 0.0;
        for _ in 0..runs {
            let mut cmd = Command::new(&exe);
            cmd.arg("--one").arg(&path);
            if ignore {
                cmd.arg("--ignore");
            }
            let out = cmd.output().expect("run child");
            if !out.status.success() {
                eprintln!("{file}: {}", String::from_utf8_lossy(&out.stderr));
                break;
            }
            let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
            last = line.split(' ').map(String::from).collect();
            times.push(last[0].parse::<f64>().unwrap_or(f64::NAN));
            rss = rss.max(last[6].parse().unwrap_or(0.0));
        }
        if times.is_empty() {
            continue;
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let pods: f64 = last[1].parse().unwrap_or(0.0);
        let price: f64 = last[3].parse().unwrap_or(0.0);
        let ratio = readme_lb(&file).map_or("-".to_string(), |lb| format!("{:.3}", price / lb));
        println!(
            "| {file} | {} | {:.4} s | {:.0} | {} | {:.2} | {} | {ratio} | {} | {:.0} MB |{}",
            if ignore { "ignore" } else { "respect" },
            median,
            pods / median,
            last[2],
            price,
            last[4],
            last[5],
            rss,
            last.get(7)
                .filter(|z| !z.is_empty())
                .map(|z| format!(" zones: {z}"))
                .unwrap_or_default()
        );
    }
}
