//! `dovetail plan` end to end: the conventions' JSON keys, exit codes, precise
//! reasons for unplaceable pods, existing capacity from a snapshot, and
//! clear errors for bad input.

use serde_json::Value;

use crate::support::{dovetail, root};

const BENCH: &str = "../shared/bench/karpenter-scheduling";
const SIM_CATALOG: &str = "src/cloud/sim/sim-catalog.json";
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
