//! A newcomer's first hour: what the CLI says, checked as a user reads it.
//! Help text, hints, messages and grouped output are compared with the
//! files under `tests/fixtures/newcomer/` (`DOVETAIL_BLESS=1` rewrites them).

use std::path::Path;

use serde_json::Value;

use crate::support::{Output, assert_matches_file, dovetail, root};

const BENCH: &str = "../shared/bench/karpenter-scheduling";

fn bench(file: &str) -> String {
    root().join(BENCH).join(file).display().to_string()
}

fn expected(name: &str) -> std::path::PathBuf {
    Path::new("tests/fixtures/newcomer").join(name)
}

/// Output with a temporary directory's path replaced by `TMP`.
fn scrub(out: &str, dir: &Path) -> String {
    out.replace(&dir.display().to_string(), "TMP")
}

/// `plan --help` and `simulate --help` listed six formats and then refused
/// four of them.
#[test]
fn help_lists_only_the_formats_a_command_accepts() {
    for (cmd, formats) in [
        ("plan", "[possible values: text, json]"),
        ("simulate", "[possible values: text, json, html]"),
        ("diff", "[possible values: text, markdown, json]"),
        ("aws instance-types", "[possible values: text, json]"),
    ] {
        let mut args: Vec<&str> = cmd.split(' ').collect();
        args.push("--help");
        let out = dovetail(&args);
        assert_eq!(out.code, 0);
        assert!(out.stdout.contains(formats), "{cmd}: {}", out.stdout);
        assert!(!out.stdout.contains("junit"), "{cmd}: {}", out.stdout);
    }
    assert_matches_file(
        &dovetail(&["plan", "--help"]).stdout,
        &expected("plan-help.expected"),
    );
    let out = dovetail(&["plan", "--catalog", "c", "--pods", "p", "-o", "junit"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("invalid value 'junit' for '--output <OUTPUT>'"),
        "{}",
        out.stderr
    );
}

/// `plan`'s `--catalog` hint pointed at a document that did not exist.
#[test]
fn the_catalog_hint_points_at_the_catalog_document() {
    let out = dovetail(&[
        "plan",
        &bench(""),
        "--catalog",
        "/nonexistent/catalog.json",
        "--pods",
        &bench("pods-diverse-1.jsonl"),
    ]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("docs/catalog.md"), "{}", out.stderr);
    assert!(root().join("docs/catalog.md").is_file());
}

/// A git repository with `pools.yaml` committed, then one file changed and
/// one added on disk.
fn git_repo_with_local_changes() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let git = git2::Repository::init(dir.path()).unwrap();
    let config = std::fs::read_to_string(root().join("examples-repo/nodepools/general.yaml"))
        .unwrap()
        + "---\n"
        + &std::fs::read_to_string(root().join("examples-repo/nodeclasses/default.yaml")).unwrap();
    std::fs::write(dir.path().join("pools.yaml"), &config).unwrap();
    let mut index = git.index().unwrap();
    index.add_path(Path::new("pools.yaml")).unwrap();
    index.write().unwrap();
    let tree = git.find_tree(index.write_tree().unwrap()).unwrap();
    let sig =
        git2::Signature::new("t", "t@example.com", &git2::Time::new(1_700_000_000, 0)).unwrap();
    git.commit(Some("HEAD"), &sig, &sig, "config", &tree, &[])
        .unwrap();
    std::fs::write(
        dir.path().join("pools.yaml"),
        config.replace("    cpu: \"1000\"\n", "    cpu: lots\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("new.yaml"), "kind: NodePool\n").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not yaml\n").unwrap();
    dir
}

/// `validate .` in a git repository validated HEAD without saying so, so a
/// local run passed while the files on disk were broken.
#[test]
fn validate_says_which_revision_it_read_and_what_it_left_out() {
    let dir = git_repo_with_local_changes();
    let path = dir.path().to_str().unwrap();
    let out = dovetail(&["validate", path]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.stderr);
    assert!(
        lines[0].starts_with("validate: checked the committed tree of HEAD ("),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].ends_with("; 2 YAML files with uncommitted changes (modified or untracked) not checked: new.yaml, pools.yaml"),
        "{}",
        lines[0]
    );
    assert_eq!(
        lines[1],
        "hint: `dovetail validate --worktree` checks the files on disk"
    );
    let out = dovetail(&["validate", path, "--worktree"]);
    assert_eq!(out.code, 1);
    assert!(!out.stderr.contains("committed tree"), "{}", out.stderr);
}

/// `diff`'s unknown-ref hint suggested `--worktree`, which diff did not
/// accept; comparing HEAD with the files on disk is now `diff --worktree`.
#[test]
fn diff_compares_head_with_the_working_tree() {
    let dir = git_repo_with_local_changes();
    std::fs::remove_file(dir.path().join("new.yaml")).unwrap();
    let pools = dir.path().join("pools.yaml");
    let text = std::fs::read_to_string(&pools).unwrap();
    std::fs::write(
        &pools,
        text.replace("    cpu: lots\n", "    cpu: \"2000\"\n"),
    )
    .unwrap();
    let path = dir.path().to_str().unwrap();
    for args in [
        vec!["diff", path, "--worktree"],
        vec!["diff", path, "--from", "HEAD", "--worktree"],
    ] {
        let out = dovetail(&args);
        assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("-> the working tree"), "{}", out.stdout);
        assert!(out.stdout.contains("NodePool/general"), "{}", out.stdout);
    }
    let out = dovetail(&["diff", path, "--from", "no-such-branch"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--worktree"), "{}", out.stderr);
    let out = dovetail(&["diff", path, "--worktree", "--to", "HEAD"]);
    assert_eq!(out.code, 2, "--worktree replaces --to");
}

/// `--strict` exited 1 on warnings without saying why.
#[test]
fn strict_says_that_it_made_the_warnings_fail() {
    let dir = tempfile::tempdir().unwrap();
    let general = std::fs::read_to_string(root().join("examples-repo/nodepools/general.yaml"))
        .unwrap()
        .replace("  limits:\n    cpu: \"1000\"\n    memory: 4000Gi\n", "");
    std::fs::write(dir.path().join("general.yaml"), general).unwrap();
    std::fs::copy(
        root().join("examples-repo/nodeclasses/default.yaml"),
        dir.path().join("default.yaml"),
    )
    .unwrap();
    let path = dir.path().to_str().unwrap();
    let out = dovetail(&["validate", path, "--worktree"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let out = dovetail(&["validate", path, "--worktree", "--strict", "-o", "json"]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.ends_with(
            "validate: --strict: the 1 warning fails the run (without --strict it would pass)\n"
        ),
        "{}",
        out.stderr
    );
}

/// 10,000 copies of one mistake printed 10,001 errors, each with the same
/// hint: each hint is printed once, and a check's errors beyond 20 are
/// counted.
#[test]
fn a_flood_of_identical_errors_is_grouped() {
    let dir = tempfile::tempdir().unwrap();
    let docs: String = (0..10_000).map(|_| "---\n- a list\n").collect();
    std::fs::write(dir.path().join("bad.yaml"), docs).unwrap();
    let out = dovetail(&["validate", dir.path().to_str().unwrap(), "--worktree"]);
    assert_eq!(out.code, 1);
    let text = scrub(&out.stdout, dir.path());
    assert!(text.lines().count() < 30, "{text}");
    assert_matches_file(&text, &expected("flood.expected"));
    // Every one is still in the JSON.
    let out = dovetail(&[
        "validate",
        dir.path().to_str().unwrap(),
        "--worktree",
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["error_count"], 10_001);
}

fn plan(repo: &str, catalog: &str, pods: &Path) -> Output {
    dovetail(&[
        "plan",
        repo,
        "--catalog",
        catalog,
        "--pods",
        pods.to_str().unwrap(),
    ])
}

/// `$-0.0000/h` when nothing was planned.
#[test]
fn an_empty_plan_costs_zero() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("none.yaml");
    std::fs::write(&pods, "").unwrap();
    let out = plan(&bench(""), &bench("instance-types.json"), &pods);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("$0.0000/h"), "{}", out.stdout);
    assert!(!out.stdout.contains("-0.0"), "{}", out.stdout);
}

/// A pod per workload and reason, and NodeClaims alike, are one line each:
/// `plan` on 20,000 pods printed 12,001 lines, the summary only at the top.
#[test]
fn plan_groups_alike_nodeclaims_and_pods_by_workload() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods.yaml");
    let mut text = String::new();
    for i in 0..300 {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: web-{i}\n  namespace: default\n  labels: {{app: web, pod-template-hash: 5d4f9}}\n  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-5d4f9, uid: u, controller: true}}]\nspec:\n  affinity: {{podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: kubernetes.io/hostname, labelSelector: {{matchLabels: {{app: web}}}}}}]}}}}\n  containers: [{{name: c, resources: {{requests: {{cpu: \"{cpu}\", memory: 1Gi}}}}}}]\n",
            cpu = if i < 200 { "1" } else { "512" }
        ));
    }
    std::fs::write(&pods, text).unwrap();
    let out = plan(&bench(""), &bench("instance-types.json"), &pods);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let text = scrub(&out.stdout, dir.path());
    let text = regex::Regex::new(r"solved in [0-9.]+s")
        .unwrap()
        .replace_all(&text, "solved in S");
    assert!(text.lines().count() < 20, "{text}");
    assert!(
        text.contains(
            "  100 pods of Deployment default/web: no instance type in NodePool bench has cpu=512"
        ),
        "{text}"
    );
    assert_matches_file(&text, &expected("plan-grouped.expected"));
}

/// Reasons a user can act on, per NodePool, in text and JSON: before, all
/// of these came out as "no instance type in NodePool … has cpu=1".
#[test]
fn unschedulable_reasons_say_what_rules_each_pool_out() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods.yaml");
    std::fs::write(
        &pods,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: torn, namespace: default}\nspec:\n  nodeSelector: {topology.kubernetes.io/zone: test-zone-1}\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [test-zone-2]}]\n  containers: [{name: c, resources: {requests: {cpu: '1'}}}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p5, namespace: default}\nspec:\n  nodeSelector: {node.kubernetes.io/instance-type: p5.48xlarge}\n  containers: [{name: c, resources: {requests: {cpu: '1'}}}]\n",
    )
    .unwrap();
    let out = dovetail(&[
        "plan",
        &bench(""),
        "--catalog",
        &bench("instance-types.json"),
        "--pods",
        pods.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let of = |pod: &str| -> (String, Value) {
        let u = v["unschedulable"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["pod"] == pod)
            .unwrap_or_else(|| panic!("{pod} is not unschedulable: {v}"));
        (
            u["reason"].as_str().unwrap().to_string(),
            u["nodepools"].clone(),
        )
    };
    let reasons = [of("default/p5"), of("default/torn")];
    assert_eq!(
        reasons[0].0,
        "no instance type of NodePool bench satisfies node.kubernetes.io/instance-type In [p5.48xlarge] (the pod requires it)",
        "{reasons:?}"
    );
    assert_eq!(
        reasons[0].1,
        serde_json::json!([{"nodepool": "bench", "reason": reasons[0].0}])
    );
    assert!(
        reasons[1].0.starts_with("the pod's node affinity contradicts itself: nodeSelector topology.kubernetes.io/zone In [test-zone-1] and required node affinity topology.kubernetes.io/zone In [test-zone-2]"),
        "{reasons:?}"
    );
    assert_eq!(reasons[1].1[0]["nodepool"], Value::Null);
    // An empty catalog.
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "{\"instanceTypes\": []}").unwrap();
    let out = plan(&bench(""), empty.to_str().unwrap(), &pods);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("NodePool bench has no instance types (is the catalog empty?)"),
        "{}",
        out.stdout
    );
}

/// A catalog whose zones match none of the simulation's: every pod said
/// "no instance type matches" for the whole run.
#[test]
fn simulate_refuses_a_catalog_of_other_zones() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("s.yaml");
    std::fs::write(
        &scenario,
        format!(
            "config: {}\ncatalog: {}\nregion: us-west-2\nuntil: 1m\n",
            root().join("examples-repo").display(),
            root().join("src/world/ec2/sim-catalog.json").display()
        ),
    )
    .unwrap();
    let out = dovetail(&["simulate", scenario.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert!(
        out.stderr.starts_with(&format!(
            "{}:3:9: error: none of the catalog's zones (us-east-1a, us-east-1b, us-east-1c) is among the simulation's zones (us-west-2a, us-west-2b, us-west-2c)",
            scenario.display()
        )),
        "{}",
        out.stderr
    );
}

/// A scenario with 300 pods no instance type fits and 5 that fit.
fn flooding_scenario(dir: &Path) -> std::path::PathBuf {
    let scenario = dir.join("s.yaml");
    let deployment = |name: &str, replicas: u32, cpu: &str| {
        format!(
            "      - apiVersion: apps/v1\n        kind: Deployment\n        metadata: {{name: {name}, namespace: shop}}\n        spec:\n          replicas: {replicas}\n          selector: {{matchLabels: {{app: {name}}}}}\n          template:\n            metadata: {{labels: {{app: {name}}}}}\n            spec:\n              containers:\n                - name: {name}\n                  image: example/{name}:1\n                  resources: {{requests: {{cpu: '{cpu}', memory: 1Gi}}}}\n"
        )
    };
    std::fs::write(
        &scenario,
        format!(
            "config: {}\ntimeline:\n  - at: 0s\n    apply:\n{}{}until: 10m\n",
            root().join("examples-repo").display(),
            deployment("web", 300, "500"),
            deployment("api", 5, "1"),
        ),
    )
    .unwrap();
    scenario
}

/// simulate's text report: 300 identical `FailedProvisioning` lines (200
/// of them in the text window, burying the rest) and 300 identical pending
/// reasons are one line each, named by workload; objects are named
/// `Kind/namespace/name` throughout (an applied Deployment was
/// `Deployment/web`, its pods' workload `Deployment/shop/web`); the summary
/// ends with cost and utilization per NodePool.
#[test]
fn simulate_groups_alike_events_and_breaks_the_fleet_down_by_nodepool() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = flooding_scenario(dir.path());
    let out = dovetail(&["simulate", scenario.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let text = &out.stdout;
    assert_eq!(text.matches("FailedProvisioning").count(), 1, "{text}");
    assert!(
        text.contains("  +0h00m01s  300 pods of Deployment/shop/web          FailedProvisioning: no instance type in NodePool arm64 has cpu=500;"),
        "{text}"
    );
    assert!(
        text.contains("  +0h00m00s  Deployment/shop/web                      Applied\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "\n  300 pods of Deployment/shop/web: no instance type in NodePool arm64 has cpu=500;"
        ),
        "{text}"
    );
    assert!(!text.contains("\x1b["), "no colour on a pipe: {text}");
    assert_matches_file(text, &expected("simulate-grouped.expected"));

    let out = dovetail(&["simulate", scenario.to_str().unwrap(), "-o", "json"]);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let pools = v["summary"]["nodepools"].as_array().unwrap();
    assert_eq!(pools.len(), 1, "{pools:?}");
    assert_eq!(pools[0]["nodepool"], "arm64");
    assert_eq!(
        (
            pools[0]["nodes"].as_u64(),
            pools[0]["nodes_launched"].as_u64()
        ),
        (Some(2), Some(2))
    );
    let fleet = v["summary"]["price_per_hour"].as_f64().unwrap();
    assert!((pools[0]["price_per_hour"].as_f64().unwrap() - fleet).abs() < 1e-6);
    let cpu = pools[0]["cpu_utilization"].as_f64().unwrap();
    assert!(cpu > 0.0 && cpu <= 1.0, "{cpu}");
    // Prices in the report are rounded to a millionth of a dollar.
    for n in v["nodes"].as_array().unwrap() {
        let p = n["price_per_hour"].to_string();
        assert!(p.split('.').nth(1).is_none_or(|d| d.len() <= 6), "{p}");
    }
}
