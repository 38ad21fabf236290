//! Benchmark: the footprint of `dovetail simulate --serve` with the 24-hour
//! benchmark's cluster (2,000 nodes, 40,000 pods): how long kubectl takes
//! to list and to see a change through a watch, and the server's memory.
//!
//! The cluster is the state two simulated hours into the 24-hour
//! benchmark's scenario (40 Deployments of 1,000 pods), written as a
//! snapshot and served as a scenario's `initial` state with `--controller
//! none` (nothing changes it but the benchmark). kubectl must be on PATH.
//!
//! Run: `cargo bench --bench serve`. Results go in BENCHMARKS.md.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dovetail::simulate::driver::Simulation;
use dovetail::simulate::scenario;

/// The binary's allocator and its settings, so the figures are the binary's.
#[path = "../src/allocator.rs"]
mod allocator;

#[path = "common/cluster.rs"]
mod cluster;
use cluster::{CONFIG, DEPLOYMENTS, REPLICAS};

const RUNS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `VmRSS` and `VmHWM` of a process, in MiB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// One HTTP/1.1 request to the served API; the response's size and the
/// time to read all of it.
fn http(addr: &str, method: &str, path: &str, headers: &str, body: &str) -> (usize, f64) {
    let t = Instant::now();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    stream.read_to_end(&mut out).unwrap();
    assert!(
        out.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&out[..out.len().min(300)])
    );
    (out.len(), t.elapsed().as_secs_f64())
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::create_dir_all(dir.join("repo")).unwrap();
    std::fs::write(dir.join("repo/config.yaml"), CONFIG).unwrap();
    let t = Instant::now();
    let text = cluster::scenario_text(DEPLOYMENTS, REPLICAS, 1, "2h");
    let sc = scenario::parse("cluster.yaml", dir, text.as_bytes()).unwrap();
    let sim = Simulation::new(sc, None).unwrap();
    let state = sim.cluster();
    sim.run(None).unwrap();
    let snapshot = dovetail::simulate::snapshot::snapshot(&state);
    std::fs::write(
        dir.join("snapshot.json"),
        serde_json::to_vec(&snapshot).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join("serve.yaml"),
        "config: repo\ninitial: {file: snapshot.json}\nuntil: 6h\n",
    )
    .unwrap();
    println!("setup: {:.1} s", t.elapsed().as_secs_f64());

    let kubeconfig = dir.join("kubeconfig");
    let started = Instant::now();
    let mut server = Command::new(env!("CARGO_BIN_EXE_dovetail"))
        .arg("simulate")
        .arg(dir.join("serve.yaml"))
        .args([
            "--serve",
            "127.0.0.1:0",
            "--controller",
            "none",
            "--kubeconfig-out",
        ])
        .arg(&kubeconfig)
        .args(["-o", "json", "--output-file"])
        .arg(dir.join("report.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let kubectl = |args: &[&str]| {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .args(args);
        c
    };
    while !(kubeconfig.exists()
        && kubectl(&["get", "--raw", "/version"])
            .output()
            .is_ok_and(|o| o.status.success()))
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("serving after {:.1} s", started.elapsed().as_secs_f64());
    let (rss, _) = memory(server.id());
    println!("memory serving the cluster: RSS {rss:.0} MiB");

    let time = |args: &[&str], check: &dyn Fn(&str) -> bool| {
        let times: Vec<f64> = (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                let out = kubectl(args).output().unwrap();
                let elapsed = t.elapsed().as_secs_f64();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(check(&String::from_utf8_lossy(&out.stdout)));
                elapsed
            })
            .collect();
        println!(
            "kubectl {}: median {:.2} s of {RUNS} (min {:.2}, max {:.2})",
            args.join(" "),
            median(times.clone()),
            times.iter().copied().fold(f64::MAX, f64::min),
            times.iter().copied().fold(0.0, f64::max)
        );
    };
    let config = std::fs::read_to_string(&kubeconfig).unwrap();
    let addr = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: http://"))
        .unwrap()
        .to_string();
    for (what, accept) in [
        ("JSON", ""),
        (
            "Table",
            "Accept: application/json;as=Table;v=v1;g=meta.k8s.io\r\n",
        ),
    ] {
        let runs: Vec<(usize, f64)> = (0..RUNS)
            .map(|_| http(&addr, "GET", "/api/v1/pods", accept, ""))
            .collect();
        println!(
            "server: list of all pods as {what}: median {:.2} s of {RUNS}, {:.0} MB",
            median(runs.iter().map(|r| r.1).collect()),
            runs[0].0 as f64 / 1e6
        );
    }
    time(&["get", "pods", "-A", "--no-headers"], &|o| {
        o.lines().count() >= 40_000
    });
    time(&["get", "pods", "-A", "-o", "json"], &|o| {
        o.len() > 1_000_000
    });
    time(&["get", "nodes", "--no-headers"], &|o| {
        o.lines().count() >= 2_000
    });
    time(&["get", "nodeclaims", "--no-headers"], &|o| {
        o.lines().count() >= 2_000
    });

    // Watch latency: from a write's answer to its event on a watch of all
    // pods (kubectl's Table watch).
    let mut watch = kubectl(&["get", "pods", "-A", "--watch-only", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    std::thread::sleep(Duration::from_secs(3));
    let pods = kubectl(&["get", "pods", "-n", "default", "-o", "name", "--no-headers"])
        .output()
        .unwrap();
    let names: Vec<String> = String::from_utf8_lossy(&pods.stdout)
        .lines()
        .take(RUNS)
        .map(|l| l.trim_start_matches("pod/").to_string())
        .collect();
    let mut latencies = Vec::new();
    for name in &names {
        // The write straight to the server, the event through kubectl.
        let t = Instant::now();
        http(
            &addr,
            "PATCH",
            &format!("/api/v1/namespaces/default/pods/{name}"),
            "Content-Type: application/merge-patch+json\r\n",
            r#"{"metadata":{"labels":{"bench":"1"}}}"#,
        );
        loop {
            let line = lines.next().unwrap().unwrap();
            if line.ends_with(name.as_str()) {
                break;
            }
        }
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    println!(
        "watch: from a write's request to its event printed by `kubectl get pods -A --watch-only`: median {:.1} ms of {}, max {:.1} ms",
        median(latencies.clone()),
        latencies.len(),
        latencies.iter().copied().fold(0.0, f64::max)
    );
    let _ = watch.kill();
    let _ = watch.wait();
    let (rss, hwm) = memory(server.id());
    println!("memory after the lists: RSS {rss:.0} MiB, peak {hwm:.0} MiB");
    let _ = server.kill();
    let _ = server.wait();
}
