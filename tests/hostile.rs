//! Hostile and large input: no write outside the target whatever the
//! symlinks, errors that name the file and line, bounded work.

use std::path::{Path, PathBuf};

use crate::support::{Output, dovetail, root};

/// A temporary directory with a configuration repository `repo/` (the
/// commit scenario's) and a directory `outside/` that must stay untouched.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("repo")).unwrap();
        std::fs::create_dir(dir.path().join("outside")).unwrap();
        std::fs::copy(
            root().join("tests/scenarios/commit-repo/config.yaml"),
            dir.path().join("repo/config.yaml"),
        )
        .unwrap();
        Sandbox { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Writes the scenario `s.yaml` and runs it.
    fn simulate(&self, scenario: &str) -> Output {
        let file = self.path("s.yaml");
        std::fs::write(&file, scenario).unwrap();
        dovetail(&["simulate", file.to_str().unwrap(), "-o", "json"])
    }

    fn scenario_name(&self) -> String {
        self.path("s.yaml").display().to_string()
    }

    fn outside_is_untouched(&self) {
        let left: Vec<_> = std::fs::read_dir(self.path("outside"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("victim.yaml")]);
        assert_eq!(
            std::fs::read_to_string(self.path("outside/victim.yaml")).unwrap(),
            "precious\n"
        );
        assert!(!self.dir.path().join("w.yaml").exists());
    }
}

fn commit_scenario(files: &str) -> String {
    format!("config: repo\ntimeline:\n  - at: 1m\n    commit:\n      files:\n{files}until: 2m\n")
}

/// A pull request that adds a scenario and a symlink must not be able to
/// make `simulate` write outside the repository. Before, the private copy
/// kept the links and the step wrote through them.
#[cfg(unix)]
#[test]
fn a_commit_step_never_writes_through_a_symlink() {
    use std::os::unix::fs::symlink;
    for (link, target, file) in [
        ("linkdir", "../outside", "linkdir/w.yaml"),
        ("up", "..", "up/w.yaml"),
        (
            "config-link.yaml",
            "../outside/victim.yaml",
            "config-link.yaml",
        ),
        ("deep", "../outside", "deep/er/w.yaml"),
    ] {
        let sb = Sandbox::new();
        std::fs::write(sb.path("outside/victim.yaml"), "precious\n").unwrap();
        symlink(target, sb.path("repo").join(link)).unwrap();
        let out = sb.simulate(&commit_scenario(&format!(
            "        {file}: |\n          apiVersion: v1\n          kind: ConfigMap\n"
        )));
        assert_eq!(out.code, 2, "{file}: {}", out.stderr);
        let expected = format!("{}:6:9: error: commit: \"{file}\": ", sb.scenario_name());
        assert!(out.stderr.starts_with(&expected), "{file}: {}", out.stderr);
        assert!(
            out.stderr.contains("never writes through a symlink"),
            "{}",
            out.stderr
        );
        sb.outside_is_untouched();
    }
}

/// Deleting through a symlinked directory would remove a file outside.
#[cfg(unix)]
#[test]
fn a_commit_step_never_deletes_through_a_symlink() {
    let sb = Sandbox::new();
    std::fs::write(sb.path("outside/victim.yaml"), "precious\n").unwrap();
    std::os::unix::fs::symlink("../outside", sb.path("repo/linkdir")).unwrap();
    let out = sb.simulate(&commit_scenario("        linkdir/victim.yaml: null\n"));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .starts_with(&format!("{}:6:9: error: commit: ", sb.scenario_name())),
        "{}",
        out.stderr
    );
    sb.outside_is_untouched();
}

/// Both used to print a bare path or `error: commit: cannot delete ...`,
/// without the scenario's file and line.
#[test]
fn a_missing_config_and_a_missing_file_to_delete_name_the_scenario_line() {
    let sb = Sandbox::new();
    let out = sb.simulate("# a scenario\nconfig: nowhere\nuntil: 1m\n");
    assert_eq!(out.code, 2);
    let expected = format!(
        "{}:2:9: error: config: cannot read the configuration repository ",
        sb.scenario_name()
    );
    assert!(out.stderr.starts_with(&expected), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("hint: `config` is relative to the scenario file"),
        "{}",
        out.stderr
    );

    let out = sb.simulate(&commit_scenario(
        "        config.yaml: null\n        absent.yaml: null\n",
    ));
    assert_eq!(out.code, 2);
    let expected = format!(
        "{}:7:9: error: commit: cannot delete \"absent.yaml\": it is not in the configuration repository ",
        sb.scenario_name()
    );
    assert!(out.stderr.starts_with(&expected), "{}", out.stderr);

    // A file written by an earlier step may be deleted by a later one; one
    // deleted earlier may not be deleted again.
    let two_steps = "config: repo\ntimeline:\n  - at: 1m\n    commit:\n      files:\n        extra.yaml: |\n          apiVersion: v1\n          kind: ConfigMap\n          metadata: {name: x}\n  - at: 2m\n    commit:\n      files:\n        extra.yaml: null\n  - at: 3m\n    commit:\n      files:\n        extra.yaml: null\nuntil: 4m\n";
    let out = sb.simulate(two_steps);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.starts_with(&format!(
            "{}:17:9: error: commit: cannot delete \"extra.yaml\"",
            sb.scenario_name()
        )),
        "{}",
        out.stderr
    );
    assert!(Path::new(&sb.path("repo/config.yaml")).exists());
}

const BENCH: &str = "../shared/bench/karpenter-scheduling";

fn bench(file: &str) -> String {
    root().join(BENCH).join(file).display().to_string()
}

/// A copy of `examples-repo/` with the general NodePool's cpu limit set.
fn repo_with_cpu_limit(dir: &Path, limit: &str) -> PathBuf {
    let repo = dir.join("repo");
    for sub in ["nodepools", "nodeclasses"] {
        std::fs::create_dir_all(repo.join(sub)).unwrap();
        for e in std::fs::read_dir(root().join("examples-repo").join(sub)).unwrap() {
            let e = e.unwrap();
            let text = std::fs::read_to_string(e.path()).unwrap();
            let text = text.replace("    cpu: \"1000\"\n", &format!("    cpu: \"{limit}\"\n"));
            std::fs::write(repo.join(sub).join(e.file_name()), text).unwrap();
        }
    }
    repo
}

/// `validate` accepted these limits, `plan` then exited 2 ("out of
/// range") and the controller dropped the NodePool: now every layer reads
/// them as unlimited, as Karpenter does.
#[test]
fn limits_beyond_i64_mean_unlimited_in_every_command() {
    for limit in ["1E", "1e18", "9223372036854775807", "1e400"] {
        let dir = tempfile::tempdir().unwrap();
        let repo = repo_with_cpu_limit(dir.path(), limit);
        let repo_s = repo.to_str().unwrap();
        let out = dovetail(&["validate", repo_s]);
        assert_eq!(out.code, 0, "{limit}: {}{}", out.stdout, out.stderr);
        let pods = dir.path().join("pods.yaml");
        std::fs::write(
            &pods,
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: default}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: '2', memory: 1Gi}}\n",
        )
        .unwrap();
        let out = dovetail(&[
            "plan",
            repo_s,
            "--catalog",
            "src/world/ec2/sim-catalog.json",
            "--pods",
            pods.to_str().unwrap(),
            "-o",
            "json",
        ]);
        assert_eq!(out.code, 0, "{limit}: {}{}", out.stdout, out.stderr);
        let scenario = dir.path().join("s.yaml");
        std::fs::write(
            &scenario,
            "config: repo\ntimeline:\n  - at: 0s\n    apply:\n      - apiVersion: apps/v1\n        kind: Deployment\n        metadata: {name: web, namespace: default}\n        spec:\n          replicas: 3\n          selector: {matchLabels: {app: web}}\n          template:\n            metadata: {labels: {app: web}}\n            spec:\n              containers:\n                - name: web\n                  image: example/web:1\n                  resources: {requests: {cpu: '1', memory: 1Gi}}\nuntil: 10m\n",
        )
        .unwrap();
        let out = dovetail(&["simulate", scenario.to_str().unwrap(), "-o", "json"]);
        assert_eq!(out.code, 0, "{limit}: {}", out.stderr);
        let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(report["summary"]["pods_pending"], 0, "{limit}: {report}");
        let invalid = report["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"] == "InvalidNodePool");
        assert!(!invalid, "{limit}: the NodePool was dropped");
    }
}

/// The API server rejects negative requests; `plan` printed
/// `requests cpu=-85` and a nonsense ratio before.
#[test]
fn negative_requests_are_rejected_naming_the_pod_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods.yaml");
    std::fs::write(
        &pods,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: ok, namespace: default}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: 1}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: neg, namespace: shop}\nspec:\n  containers:\n  - name: c\n    resources:\n      requests:\n        cpu: -85m\n",
    )
    .unwrap();
    let plan = |pods: &Path, snapshot: Option<&Path>| {
        let mut args = vec![
            "plan".to_string(),
            bench(""),
            "--catalog".into(),
            bench("instance-types.json"),
            "--pods".into(),
            pods.display().to_string(),
        ];
        if let Some(s) = snapshot {
            args.extend(["--snapshot".into(), s.display().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        dovetail(&args)
    };
    let out = plan(&pods, None);
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert_eq!(
        out.stderr.lines().next().unwrap(),
        format!(
            "{}:17:14: error: Pod/shop/neg: spec.containers[0].resources.requests.cpu: \"-85m\": must be greater than or equal to 0",
            pods.display()
        )
    );
    // The same pod in a JSON snapshot: named at its line.
    let snapshot = dir.path().join("cluster.json");
    std::fs::write(
        &snapshot,
        "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n{\"apiVersion\": \"v1\", \"kind\": \"Node\", \"metadata\": {\"name\": \"n\"}},\n{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"neg\", \"namespace\": \"shop\"}, \"spec\": {\"nodeName\": \"n\", \"containers\": [{\"name\": \"c\", \"resources\": {\"requests\": {\"memory\": \"-1Gi\"}}}]}}\n]}\n",
    )
    .unwrap();
    let ok_pods = dir.path().join("ok.yaml");
    std::fs::write(&ok_pods, "").unwrap();
    let out = plan(&ok_pods, Some(&snapshot));
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert!(
        out.stderr.starts_with(&format!(
            "{}:3:1: error: Pod/shop/neg: spec.containers[0].resources.requests.memory: \"-1Gi\": must be greater than or equal to 0\n",
            snapshot.display()
        )),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("error: error"), "{}", out.stderr);
}

/// A scenario's invalid quantities and unbounded counts and times are
/// errors at their line, before anything runs: `cpu: lots` ran with exit
/// 0, `replicas: 10000000` took 8 GB, and `until: 99999999999999h`
/// simulated nothing and exited 0.
#[test]
fn scenario_values_are_checked_at_their_line_before_anything_runs() {
    let sb = Sandbox::new();
    let deployment = |replicas: &str, cpu: &str| {
        format!(
            "config: repo\ntimeline:\n  - at: 0s\n    apply:\n      - apiVersion: apps/v1\n        kind: Deployment\n        metadata: {{name: web, namespace: default}}\n        spec:\n          replicas: {replicas}\n          selector: {{matchLabels: {{app: web}}}}\n          template:\n            metadata: {{labels: {{app: web}}}}\n            spec:\n              containers:\n                - name: web\n                  image: example/web:1\n                  resources: {{requests: {{cpu: {cpu}, memory: 1Gi}}}}\nuntil: 10m\n"
        )
    };
    let name = sb.scenario_name();
    for (scenario, expected) in [
        (
            deployment("3", "lots"),
            format!(
                "{name}:17:47: error: Deployment/web: spec.template.spec.containers[0].resources.requests.cpu: invalid quantity \"lots\""
            ),
        ),
        (
            deployment("3", "-1"),
            format!(
                "{name}:17:47: error: Deployment/web: spec.template.spec.containers[0].resources.requests.cpu: \"-1\": must be greater than or equal to 0"
            ),
        ),
        (
            deployment("10000000", "1"),
            format!(
                "{name}:9:21: error: Deployment/web: spec.replicas: 10000000 is more than the simulation's limit of 100000 pods per workload"
            ),
        ),
        (
            "config: repo\nuntil: 99999999999999h\n".to_string(),
            format!(
                "{name}:2:8: error: until: invalid duration \"99999999999999h\": longer than 2562047h47m16s, the most a Go duration holds"
            ),
        ),
        (
            "config: repo\nuntil: 9999h\n".to_string(),
            format!(
                "{name}:2:8: error: until reaches 9999h after the start, beyond the simulation's limit of 744h (31 days)"
            ),
        ),
        (
            "config: repo\ntimeline:\n  - advance: 700h\n  - advance: 100h\n".to_string(),
            format!(
                "{name}:4:14: error: advance reaches 800h after the start, beyond the simulation's limit of 744h"
            ),
        ),
        (
            "config: repo\ntimeline:\n  - at: 1m\n    scale: {deployment: web, replicas: 200000}\n"
                .to_string(),
            format!("{name}:4:40: error: replicas must be an integer from 0 to 100000"),
        ),
    ] {
        let out = sb.simulate(&scenario);
        assert_eq!(out.code, 2, "{scenario}: {}", out.stdout);
        assert!(
            out.stderr.starts_with(&expected),
            "expected {expected}\n got {}",
            out.stderr
        );
    }
    // Three workloads of 100,000 pods: the third step goes over the total.
    let mut three = String::from("config: repo\ntimeline:\n");
    for n in ["a", "b", "c"] {
        three.push_str(&format!("  - apply:\n      - {{apiVersion: apps/v1, kind: Deployment, metadata: {{name: {n}}}, spec: {{replicas: 100000}}}}\n"));
    }
    let out = sb.simulate(&three);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.starts_with(&format!("{name}:7:5: error: the workloads reach 300000 pods by this step, more than the simulation's limit of 200000")),
        "{}",
        out.stderr
    );
    // A manifest file with a bad quantity is named at its own line.
    std::fs::write(
        sb.path("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources:\n      limits: {memory: 12 GB}\n",
    )
    .unwrap();
    let out = sb.simulate("config: repo\ntimeline:\n  - apply: {file: pod.yaml}\n");
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.starts_with(&format!(
            "{}:8:24: error: Pod/p: spec.containers[0].resources.limits.memory: invalid quantity \"12 GB\"",
            sb.path("pod.yaml").display()
        )),
        "{}",
        out.stderr
    );
    // --until is bounded too.
    std::fs::write(sb.path("ok.yaml"), "config: repo\nuntil: 1m\n").unwrap();
    let out = dovetail(&[
        "simulate",
        sb.path("ok.yaml").to_str().unwrap(),
        "--until",
        "9999h",
    ]);
    assert_eq!(out.code, 2);
    assert_eq!(
        out.stderr,
        "error: --until 9999h is beyond the simulation's limit of 744h (31 days)\n"
    );
    let out = dovetail(&[
        "simulate",
        sb.path("ok.yaml").to_str().unwrap(),
        "--until",
        "9999999h",
    ]);
    assert_eq!(out.code, 2);
    assert_eq!(
        out.stderr,
        "error: --until: invalid duration \"9999999h\": longer than 2562047h47m16s, the most a Go duration holds\n"
    );
}

/// A NodePool the controller cannot use is never dropped silently: its
/// Ready condition says why, beside the Event (before, only the Event).
#[test]
fn the_controller_marks_a_nodepool_it_cannot_use() {
    use std::sync::Arc;

    use dovetail::api::{EC2NodeClass, NodePool};
    use dovetail::clock::{Clock, ManualClock, Timestamp};
    use dovetail::cluster::ObjectKey;
    use dovetail::controller::{BATCH_IDLE, Controller, Settings};
    use dovetail::world::MemoryCluster;
    use dovetail::world::ec2::{SimConfig, SimEc2};
    use k8s_openapi::api::core::v1::Pod;

    fn from_yaml<K: serde::de::DeserializeOwned>(text: &str) -> K {
        let value: serde_json::Value = serde_saphyr::from_str(text).unwrap();
        serde_json::from_value(value).unwrap()
    }
    let clock = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let cluster = Arc::new(MemoryCluster::new(dyn_clock.clone()));
    let cloud = Arc::new(SimEc2::new(
        SimConfig::new(SimEc2::builtin_catalog().unwrap()),
        dyn_clock.clone(),
    ));
    let pool: NodePool = from_yaml(
        &std::fs::read_to_string(root().join("examples-repo/nodepools/general.yaml")).unwrap(),
    );
    cluster.create(pool).unwrap();
    let pod: Pod = from_yaml(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: default}\nspec: {containers: [{name: c, image: i, resources: {requests: {cpu: '1'}}}]}\nstatus: {phase: Pending, conditions: [{type: PodScheduled, status: 'False', reason: Unschedulable}]}\n",
    );
    cluster.create(pod).unwrap();
    let mut controller = Controller::new(cluster.clone(), cloud, dyn_clock, Settings::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let pass = |controller: &mut Controller<MemoryCluster, SimEc2>| {
        rt.block_on(controller.reconcile_provisioning());
        clock.advance(BATCH_IDLE).unwrap();
        rt.block_on(controller.reconcile_provisioning());
    };
    pass(&mut controller);
    let ready = |cluster: &MemoryCluster| {
        let p = cluster
            .get::<NodePool>(&ObjectKey::cluster("general"))
            .unwrap();
        let c = p.condition("Ready").cloned().unwrap();
        (
            c.is_true(),
            c.reason.unwrap_or_default(),
            c.message.unwrap_or_default(),
        )
    };
    let (is_ready, reason, message) = ready(&cluster);
    assert!(!is_ready);
    assert_eq!(reason, "NodeClassNotFound");
    assert_eq!(
        message,
        "EC2NodeClass \"default\" not found; the NodePool is skipped"
    );
    let events = controller.drain_events();
    assert!(
        events
            .iter()
            .any(|e| e.object == "NodePool/general" && e.reason == "NodeClassNotFound"),
        "{events:?}"
    );
    // Once the class exists, the provisioner clears the condition it set.
    let class: EC2NodeClass = from_yaml(
        &std::fs::read_to_string(root().join("examples-repo/nodeclasses/default.yaml")).unwrap(),
    );
    cluster.create(class).unwrap();
    pass(&mut controller);
    let (is_ready, reason, _) = ready(&cluster);
    assert!(is_ready, "{reason}");
}

/// An installed (`cargo install`) or copied binary runs the demo from any
/// directory: the demo scenario and `examples-repo/` are compiled in.
/// Before, the binary read them from the checkout's path, fixed at compile
/// time, which is in the binary (and fails on any other machine).
#[test]
fn the_binary_runs_the_demo_from_an_empty_directory() {
    let bin = Path::new(env!("CARGO_BIN_EXE_dovetail"));
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("dovetail");
    std::fs::copy(bin, &copy).unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = std::process::Command::new(&copy)
        .args(["simulate", "-o", "json"])
        .current_dir(&empty)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!report["nodes"].as_array().unwrap().is_empty());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    let bytes = std::fs::read(bin).unwrap();
    let checkout = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scenarios").as_bytes();
    let found = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == checkout[0])
        .any(|(i, _)| bytes[i..].starts_with(checkout));
    assert!(!found, "the binary refers to the checkout's demo directory");
}

/// The kube client's error said its cause three times in one line.
#[test]
fn the_kubeconfig_error_says_its_cause_once() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dovetail"))
        .arg("snapshot")
        .env("KUBECONFIG", "/nonexistent/dovetail-test/config")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let first = stderr.lines().next().unwrap();
    assert!(
        first.starts_with("error: cannot configure a Kubernetes client: "),
        "{first}"
    );
    for part in [
        "/nonexistent/dovetail-test/config",
        "No such file or directory",
    ] {
        assert_eq!(first.matches(part).count(), 1, "{part} in {first}");
    }
    assert!(stderr.contains("\nhint: set KUBECONFIG"), "{stderr}");
}

/// No committed file names a path of the machine it was written on (the
/// benches read the shared catalog from an absolute path): paths are
/// relative to the crate, resolved through CARGO_MANIFEST_DIR.
#[test]
fn no_committed_file_names_this_machines_paths() {
    let repo = git2::Repository::discover(root()).unwrap();
    let index = repo.index().unwrap();
    let needles = [["/wo", "rk/"].concat(), ["/ro", "ot/"].concat()];
    let mut found = Vec::new();
    for e in index.iter() {
        let path = String::from_utf8_lossy(&e.path).to_string();
        let Ok(text) = std::fs::read_to_string(repo.workdir().unwrap().join(&path)) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            if needles.iter().any(|n| line.contains(n.as_str())) {
                found.push(format!("{path}:{}: {line}", i + 1));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// A snapshot object that cannot be converted is named at the snapshot's
/// file and the object's line; it was "snapshot:0".
#[test]
fn a_snapshot_conversion_error_names_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("cluster.yaml");
    std::fs::write(
        &snapshot,
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: n1}\n  spec:\n    taints: [{key: a, effect: Sometimes}]\n",
    )
    .unwrap();
    let pods = dir.path().join("pods.yaml");
    std::fs::write(&pods, "").unwrap();
    let out = dovetail(&[
        "plan",
        &bench(""),
        "--catalog",
        &bench("instance-types.json"),
        "--pods",
        pods.to_str().unwrap(),
        "--snapshot",
        snapshot.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert_eq!(
        out.stderr,
        format!(
            "{}:4:1: error: Node/n1: unknown taint effect \"Sometimes\"\n",
            snapshot.display()
        )
    );
}
