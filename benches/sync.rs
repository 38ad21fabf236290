//! Latency of git-driven sync: from `git commit` to every changed object
//! applied in the in-memory cluster, woken by the notify watcher (the poll
//! is set to an hour, so it never fires).
//!
//! A repository with one EC2NodeClass and `POOLS` NodePools; each commit
//! changes the CPU limit of every NodePool. The clock starts just before
//! the commit is written (git2, in this process) and stops when the last
//! NodePool shows the new limit.
//!
//! Run: `cargo bench --bench sync` (release). Prints the median and other
//! percentiles of `COMMITS` commits.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use git2::{IndexAddOption, Repository, RepositoryInitOptions, Signature, Time};

use dovetail::api::NodePool;
use dovetail::clock::{Clock, SystemClock};
use dovetail::cluster::ObjectKey;
use dovetail::sync::{Settings, SyncEngine, watch};
use dovetail::world::MemoryCluster;
use dovetail::world::apiserver::admission;

const POOLS: usize = 10;
const COMMITS: usize = 30;
/// The budget the issue sets for the median.
const BUDGET: Duration = Duration::from_millis(300);

const NODECLASS: &str = "apiVersion: karpenter.k8s.aws/v1
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
";

fn nodepool(name: &str, cpu: usize) -> String {
    format!(
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {name}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: [on-demand, spot]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: [c, m, r]
  limits:
    cpu: \"{cpu}\"
"
    )
}

fn write_pools(dir: &Path, cpu: usize) {
    for i in 0..POOLS {
        std::fs::write(
            dir.join(format!("nodepools/p{i}.yaml")),
            nodepool(&format!("p{i}"), cpu),
        )
        .expect("write a NodePool");
    }
}

fn commit(git: &Repository, n: i64) {
    let mut index = git.index().expect("index");
    index
        .add_all(["*"], IndexAddOption::DEFAULT, None)
        .expect("add");
    index.write().expect("write index");
    let tree = git
        .find_tree(index.write_tree().expect("tree"))
        .expect("tree");
    let sig = Signature::new(
        "bench",
        "bench@example.com",
        &Time::new(1_700_000_000 + n, 0),
    )
    .expect("signature");
    let parent = git.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<_> = parent.iter().collect();
    git.commit(Some("HEAD"), &sig, &sig, "bench", &tree, &parents)
        .expect("commit");
}

fn all_at(cluster: &MemoryCluster, cpu: usize) -> bool {
    let want = serde_json::Value::String(cpu.to_string());
    (0..POOLS).all(|i| {
        cluster
            .get_opt::<NodePool>(&ObjectKey::cluster(format!("p{i}")))
            .is_some_and(|p| serde_json::to_value(&p.spec.limits).expect("limits")["cpu"] == want)
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut opts = RepositoryInitOptions::new();
    opts.initial_head("main");
    let git = Repository::init_opts(dir.path(), &opts).expect("init");
    std::fs::create_dir_all(dir.path().join("nodepools")).expect("mkdir");
    std::fs::write(dir.path().join("nodeclass.yaml"), NODECLASS).expect("write");
    write_pools(dir.path(), 1);
    commit(&git, 0);

    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let cluster = Arc::new(MemoryCluster::new(clock.clone()));
    admission::register(&cluster).expect("admission");
    let mut engine = SyncEngine::new(cluster.clone(), clock, Settings::new(dir.path()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watcher = watch::RepoWatcher::new(dir.path()).expect("watcher");
    let task = runtime.spawn(async move {
        watch::run(
            &mut engine,
            Some(watcher),
            Duration::from_secs(3600),
            |_| {},
            async {
                let _ = stopped.await;
            },
        )
        .await;
    });

    let wait = |cpu: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !all_at(&cluster, cpu) {
            assert!(
                Instant::now() < deadline,
                "commit {cpu} was not applied in 30 s"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    wait(1);
    let mut times = Vec::with_capacity(COMMITS);
    for n in 0..COMMITS {
        let cpu = n + 2;
        write_pools(dir.path(), cpu);
        let started = Instant::now();
        commit(&git, i64::try_from(cpu).unwrap_or(i64::MAX));
        wait(cpu);
        times.push(started.elapsed());
        // Let the loop settle so commits do not overlap.
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = stop.send(());
    runtime.block_on(task).expect("the sync loop ends");

    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = percentile(&times, 0.5);
    println!(
        "sync latency, commit to {POOLS} NodePools applied, {COMMITS} commits: median {:.1} ms, p90 {:.1} ms, min {:.1} ms, max {:.1} ms (budget {} ms: {})",
        ms(median),
        ms(percentile(&times, 0.9)),
        ms(times[0]),
        ms(times[times.len() - 1]),
        BUDGET.as_millis(),
        if median < BUDGET { "met" } else { "NOT met" }
    );
}
