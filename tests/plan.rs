//! `dovetail plan` end to end: the conventions' JSON keys, exit codes, precise
//! reasons for unplaceable pods, existing capacity from a snapshot, and
//! clear errors for bad input.

use serde_json::Value;

use crate::support::{dovetail, root};

const BENCH: &str = "../shared/bench/karpenter-scheduling";
const SIM_CATALOG: &str = "src/world/ec2/sim-catalog.json";
const FIXTURES: &str = "tests/fixtures/plan";

fn bench(file: &str) -> String {
    root().join(BENCH).join(file).display().to_string()
}

fn json(out: &crate::support::Output) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", out.stdout, out.stderr))
}

/// `plan` on the reference workload folder with one of its pod files.
fn plan_bench(pods: &str) -> Value {
    let repo = root().join(BENCH).display().to_string();
    let out = dovetail(&[
        "plan",
        &repo,
        "--catalog",
        &bench("instance-types.json"),
        "--pods",
        pods,
        "-o",
        "json",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    json(&out)
}

#[test]
fn reference_workload_gets_one_claim_per_anti_affine_pod() {
    let v = plan_bench(&bench("pods-diverse-100.jsonl"));
    for key in [
        "schema_version",
        "solve_seconds",
        "nodeclaim_count",
        "nodeclaims",
        "existing_placements",
        "price_per_hour",
        "lower_bound_price_per_hour",
        "unschedulable",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["schema_version"], 1);
    // 100 pods in five groups: 20 hostname anti-affine pods, one per node.
    assert_eq!(v["nodeclaim_count"], 20);
    let claims = v["nodeclaims"].as_array().unwrap();
    assert_eq!(claims.len(), 20);
    let placed: usize = claims
        .iter()
        .map(|c| c["pods"].as_array().unwrap().len())
        .sum();
    assert_eq!(placed, 100);
    for c in claims {
        for key in [
            "nodepool",
            "instance_types",
            "zones",
            "capacity_types",
            "pods",
            "requests",
            "price_per_hour",
        ] {
            assert!(c.get(key).is_some(), "claim lacks {key}: {c}");
        }
        assert!(c["requests"]["cpu"].is_string());
    }
    let price = v["price_per_hour"].as_f64().unwrap();
    let bound = v["lower_bound_price_per_hour"].as_f64().unwrap();
    assert!(
        bound > 0.0 && price >= bound - 1e-9,
        "price {price} below bound {bound}"
    );
}

#[test]
fn unplaceable_pods_get_precise_reasons_and_exit_1() {
    let out = dovetail(&[
        "plan",
        "examples-repo",
        "--worktree",
        "--catalog",
        SIM_CATALOG,
        "--pods",
        &format!("{FIXTURES}/gpu-pods.yaml"),
        "-o",
        "json",
    ]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let v = json(&out);
    let unschedulable = v["unschedulable"].as_array().unwrap();
    assert_eq!(unschedulable.len(), 1, "{unschedulable:?}");
    assert_eq!(unschedulable[0]["pod"], "ml/huge");
    let reason = unschedulable[0]["reason"].as_str().unwrap();
    assert!(reason.contains("nvidia.com/gpu"), "{reason}");
    // The GPU pod lands in the GPU pool, the web pod never does.
    for c in v["nodeclaims"].as_array().unwrap() {
        let pods: Vec<&str> = c["pods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        if pods.contains(&"ml/trainer") {
            assert_eq!(c["nodepool"], "gpu");
        }
        if pods.contains(&"default/web") {
            assert_ne!(c["nodepool"], "gpu");
        }
    }
}

#[test]
fn existing_capacity_from_a_snapshot_is_used_first() {
    let out = dovetail(&[
        "plan",
        "examples-repo",
        "--worktree",
        "--catalog",
        SIM_CATALOG,
        "--pods",
        &format!("{FIXTURES}/gpu-pods.yaml"),
        "--snapshot",
        &format!("{FIXTURES}/snapshot.yaml"),
        "-o",
        "json",
    ]);
    let v = json(&out);
    let existing = v["existing_placements"].as_array().unwrap();
    assert_eq!(existing.len(), 1, "{existing:?}");
    assert_eq!(existing[0]["node"], "ip-10-0-1-1.ec2.internal");
    assert_eq!(existing[0]["pods"][0], "default/web");
}

#[test]
fn bad_inputs_exit_2_with_the_file_and_line() {
    let pods = format!("{FIXTURES}/gpu-pods.yaml");
    // An invalid configuration is refused with validate's diagnostics.
    let out = dovetail(&[
        "plan",
        "tests/fixtures/validate/schema",
        "--worktree",
        "--catalog",
        SIM_CATALOG,
        "--pods",
        &pods,
    ]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("tests/fixtures/validate/schema/nodepool.yaml:6:3: error"),
        "{}",
        out.stderr
    );

    let out = dovetail(&[
        "plan",
        "examples-repo",
        "--worktree",
        "--catalog",
        SIM_CATALOG,
        "--pods",
        &format!("{FIXTURES}/broken-pods.jsonl"),
    ]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("broken-pods.jsonl:2"), "{}", out.stderr);

    let out = dovetail(&[
        "plan",
        "examples-repo",
        "--worktree",
        "--catalog",
        "nope.json",
        "--pods",
        &pods,
    ]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("nope.json"), "{}", out.stderr);
}

/// Packing quality on the reference workload, where claims must trade pods
/// to balance cpu against memory: within 1.10× of the README's lower bound
/// (427.90 for 2,000 pods), with exactly one hostname anti-affine pod per
/// claim after the trades.
#[test]
fn reference_workload_packs_within_ten_percent_of_the_bound() {
    let pods_file = bench("pods-diverse-2000.jsonl");
    let v = plan_bench(&pods_file);
    let price = v["price_per_hour"].as_f64().unwrap();
    assert!(price <= 1.10 * 427.90, "price {price} over 1.10 × 427.90");
    let kinds: std::collections::BTreeMap<String, String> = std::fs::read_to_string(&pods_file)
        .unwrap()
        .lines()
        .map(|l| {
            let p: Value = serde_json::from_str(l).unwrap();
            let m = &p["metadata"];
            (
                format!(
                    "{}/{}",
                    m["namespace"].as_str().unwrap(),
                    m["name"].as_str().unwrap()
                ),
                m["annotations"]["bench/kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let claims = v["nodeclaims"].as_array().unwrap();
    assert_eq!(claims.len(), 400);
    for c in claims {
        let anti = c["pods"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| kinds[p.as_str().unwrap()] == "antiaffinity-hostname")
            .count();
        assert_eq!(anti, 1, "claim {c}");
    }
}

/// 1,000 pods of 1 cpu / 2Gi with required hostname anti-affinity to each
/// other, as JSON lines in a temporary directory.
fn anti_affine_pods(dir: &std::path::Path) -> String {
    let path = dir.join("pods.jsonl");
    let lines: Vec<String> = (0..1000)
        .map(|i| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("aa-{i:04}"), "namespace": "default",
                             "labels": {"app": "aa"}},
                "spec": {
                    "containers": [{"name": "c", "image": "i",
                        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}],
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "aa"}},
                         "topologyKey": "kubernetes.io/hostname"}]}}
                }
            })
            .to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    path.display().to_string()
}

/// The limits fixture with its limits replaced by `cpu` and `memory`.
fn limits_repo(dir: &std::path::Path, cpu: &str, memory: &str) -> String {
    let config = std::fs::read_to_string(root().join(FIXTURES).join("limits/config.yaml"))
        .unwrap()
        .replace("cpu: \"1000\"", &format!("cpu: \"{cpu}\""))
        .replace("memory: 4000Gi", &format!("memory: {memory}"));
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("config.yaml"), config).unwrap();
    repo.display().to_string()
}

fn plan_limits(cpu: &str, memory: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let pods = anti_affine_pods(dir.path());
    let repo = limits_repo(dir.path(), cpu, memory);
    let out = dovetail(&[
        "plan",
        &repo,
        "--catalog",
        SIM_CATALOG,
        "--pods",
        &pods,
        "-o",
        "json",
    ]);
    assert!(out.code <= 1, "{}", out.stderr);
    json(&out)
}

/// Regression: a claim reserved the largest of all the types it could
/// launch against the NodePool's limits, so 1,000 anti-affine pods under
/// limits of 20,000 cpu got 31 NodeClaims per solve.
#[test]
fn anti_affine_pods_each_get_a_claim_in_one_solve_when_the_limits_allow() {
    let v = plan_limits("20000", "80000Gi");
    assert_eq!(v["nodeclaim_count"], 1000);
    assert!(v["unschedulable"].as_array().unwrap().is_empty());
}

/// Under limits of 1,000 cpu and 4,000Gi, as many claims as the limits
/// truly allow (the cheapest type, t3.large, has 2 vCPUs: 500 fit),
/// and a reason for the rest that names the limit and what is counted.
#[test]
fn limits_bind_only_near_the_capacity_the_claims_launch() {
    let v = plan_limits("1000", "4000Gi");
    let claims = v["nodeclaims"].as_array().unwrap();
    assert_eq!(claims.len(), 500);
    // Whatever instance type each claim launches, the limit holds.
    let catalog: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join(SIM_CATALOG)).unwrap()).unwrap();
    // Capacity in vCPUs, as the limit counts it.
    let cpu_of = |name: &str| -> f64 {
        let t = catalog["instanceTypes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap();
        t["labels"]["karpenter.k8s.aws/instance-cpu"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let worst: f64 = claims
        .iter()
        .map(|c| {
            c["instance_types"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| cpu_of(t.as_str().unwrap()))
                .fold(0.0, f64::max)
        })
        .sum();
    assert!(worst <= 1000.0 + 1e-9, "claims could launch {worst} cpu");
    let unschedulable = v["unschedulable"].as_array().unwrap();
    assert_eq!(unschedulable.len(), 500);
    let reason = unschedulable[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("NodePool default would exceed limit cpu=1000: ")
            && reason.contains("reserved by 500 NodeClaim(s) planned in this solve"),
        "{reason}"
    );
}
