//! `dovetail diff --impact` end to end: configuration changes committed to
//! git repositories in temporary directories, previewed against a snapshot
//! of running nodes (`tests/fixtures/impact/snapshot.yaml`):
//! - general (EC2NodeClass `default`, on-demand or spot, cpu limit 16):
//!   `g-od-1`, `g-od-2` (on-demand) and `g-spot-1` (spot), 4 CPUs each;
//! - batch (EC2NodeClass `bottlerocket`, spot, budgets `1` and `0` during
//!   weekday business hours): `b-spot-1`, `b-spot-2`, 8 CPUs each;
//! - `system-1`, a node no NodePool manages.

use serde_json::{Value, json};

use crate::diff::Repo;
use crate::support::{Output, root};

fn fixture(name: &str) -> String {
    root()
        .join("tests/fixtures/impact")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

fn config() -> String {
    std::fs::read_to_string(fixture("config.yaml")).unwrap()
}

/// A repository with the fixture configuration, then `change` applied to
/// it in a second commit.
fn changed(change: impl Fn(&str) -> String) -> Repo {
    let mut repo = Repo::new();
    repo.write("config.yaml", &config());
    repo.commit("base");
    let new = change(&config());
    assert_ne!(new, config(), "the change must change the file");
    repo.write("config.yaml", &new);
    repo.commit("change");
    repo
}

fn run_impact(repo: &Repo, extra: &[&str]) -> Output {
    let snapshot = fixture("snapshot.yaml");
    let mut args = vec![
        "--from",
        "HEAD~1",
        "--to",
        "HEAD",
        "--impact",
        "--snapshot",
        &snapshot,
    ];
    args.extend_from_slice(extra);
    repo.diff(&args)
}

fn impact_json(repo: &Repo, extra: &[&str]) -> Value {
    let mut args = vec!["--output", "json"];
    args.extend_from_slice(extra);
    let out = run_impact(repo, &args);
    assert!(out.code <= 1, "{}{}", out.stdout, out.stderr);
    let doc: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    assert_eq!(doc["schema_version"], 1);
    doc["impact"].clone()
}

fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

fn affected(entry: &Value) -> Vec<&str> {
    entry["affected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node"].as_str().unwrap())
        .collect()
}

#[test]
fn an_ami_alias_change_reports_exactly_the_nodes_of_that_nodeclass() {
    let repo = changed(|c| c.replacen("alias: al2023@latest", "alias: al2023@v20260801", 1));
    let impact = impact_json(&repo, &[]);
    assert_eq!(impact["nodes"], 6, "five managed nodes and system-1");
    assert_eq!(
        impact["affected_nodes"],
        json!(["g-od-1", "g-od-2", "g-spot-1"]),
        "{impact}"
    );
    let class = named(&impact["ec2nodeclasses"], "default");
    assert_eq!(affected(class), ["g-od-1", "g-od-2", "g-spot-1"]);
    let reason = &class["affected"][0]["reasons"][0];
    assert_eq!(reason["code"], "ami_selection");
    assert_eq!(
        reason["message"],
        "AMI selection changed from alias al2023@latest to alias al2023@v20260801: drifts when the new selection resolves to a different image"
    );
    assert_eq!(class["affected"][0]["certain"], false);
    assert_eq!(
        affected(named(&impact["ec2nodeclasses"], "bottlerocket")),
        Vec::<&str>::new()
    );
    assert_eq!(
        affected(named(&impact["nodepools"], "batch")),
        Vec::<&str>::new()
    );
}

#[test]
fn a_requirements_change_reports_exactly_the_nodes_it_excludes() {
    let repo =
        changed(|c| c.replacen(r#"values: ["on-demand", "spot"]"#, r#"values: ["spot"]"#, 1));
    let impact = impact_json(&repo, &[]);
    assert_eq!(
        impact["affected_nodes"],
        json!(["g-od-1", "g-od-2"]),
        "{impact}"
    );
    let general = named(&impact["nodepools"], "general");
    assert_eq!(general["change"], "changed");
    assert_eq!(general["nodes"], 3);
    assert_eq!(general["affected"][0]["reasons"][0]["code"], "requirements");
    assert!(
        general["affected"][0]["reasons"][0]["message"]
            .as_str()
            .unwrap()
            .contains("karpenter.sh/capacity-type"),
        "{general}"
    );
    // Requirements are no part of any hash: the EC2NodeClasses are untouched.
    for class in impact["ec2nodeclasses"].as_array().unwrap() {
        assert_eq!(affected(class), Vec::<&str>::new());
    }
}

#[test]
fn a_taint_change_reports_exactly_the_pools_nodes_and_budget_pacing() {
    let repo = changed(|c| {
        c.replacen(
            "        name: bottlerocket\n      requirements:",
            "        name: bottlerocket\n      taints:\n        - key: batch\n          effect: NoSchedule\n      requirements:",
            1,
        )
    });
    let impact = impact_json(&repo, &["--replacement-time", "7m"]);
    assert_eq!(
        impact["affected_nodes"],
        json!(["b-spot-1", "b-spot-2"]),
        "{impact}"
    );
    let batch = named(&impact["nodepools"], "batch");
    assert_eq!(
        batch["affected"][0]["reasons"],
        json!([{"code": "nodepool_template", "message": "NodePool template changed (spec.taints)"}])
    );
    assert_eq!(impact["replacement_seconds_per_wave"], 420);
    let pacing = &batch["pacing"];
    assert_eq!(
        (
            &pacing["parallel"],
            &pacing["waves"],
            &pacing["estimated_seconds"]
        ),
        (&json!(1), &json!(2), &json!(840)),
        "{pacing}"
    );
    assert_eq!(pacing["budgets"][1]["schedule"], "0 9 * * mon-fri");
    assert_eq!(pacing["budgets"][1]["allowed"], 0);

    let text = run_impact(&repo, &["--replacement-time", "7m"]);
    assert_eq!(text.code, 1, "{}{}", text.stdout, text.stderr);
    for line in [
        "impact on 6 nodes (replacement wave: 7m)\n",
        "  NodePool/batch (changed): 2 of 2 nodes would drift\n",
        "    budget nodes=0 (0 at once) during `0 9 * * mon-fri` for 8h: replacement pauses in that window\n",
        "    replacement: 2 waves of up to 1 at a time, about 14m\n",
        "    - b-spot-1 (c7i.2xlarge): NodePool template changed (spec.taints)\n",
    ] {
        assert!(text.stdout.contains(line), "{line:?} in\n{}", text.stdout);
    }
}

#[test]
fn adding_fields_at_their_empty_values_reports_no_drift() {
    let repo = changed(|c| {
        c.replace(
            "      requirements:",
            "      taints: []\n      startupTaints: []\n      requirements:",
        )
        .replace(
            "  role: KarpenterNodeRole-example\n",
            "  role: KarpenterNodeRole-example\n  tags: {}\n  userData: \"\"\n",
        )
        .replace(
            "    spec:\n      nodeClassRef:",
            "    metadata:\n      labels: {}\n    spec:\n      nodeClassRef:",
        )
    });
    let impact = impact_json(&repo, &[]);
    assert_eq!(impact["affected_nodes"], json!([]), "{impact}");
    let text = run_impact(&repo, &[]);
    assert!(
        text.stdout
            .contains("  no node would drift and no limit is exceeded\n"),
        "{}",
        text.stdout
    );
}

#[test]
fn limits_already_exceeded_are_reported() {
    let repo = changed(|c| c.replacen("    cpu: 16\n", "    cpu: 8\n", 1));
    let impact = impact_json(&repo, &[]);
    let general = named(&impact["nodepools"], "general");
    assert_eq!(general["limits_exceeded"], true);
    assert_eq!(
        general["limits"],
        json!([{"resource": "cpu", "limit": "8", "used": "12", "exceeded": true}])
    );
    assert_eq!(
        named(&impact["nodepools"], "batch")["limits_exceeded"],
        false
    );
    assert_eq!(
        impact["affected_nodes"],
        json!([]),
        "limits do not drift nodes"
    );
    let md = run_impact(&repo, &["--output", "markdown"]);
    assert!(
        md.stdout.contains("### Impact on running nodes\n"),
        "{}",
        md.stdout
    );
    assert!(
        md.stdout.contains("**limits already exceeded: cpu 12 > 8 (no replacement can launch until usage falls below them)**"),
        "{}",
        md.stdout
    );
}

#[test]
fn the_catalog_prices_the_affected_nodes() {
    let repo = changed(|c| c.replacen("alias: al2023@latest", "alias: al2023@v20260801", 1));
    let catalog = fixture("catalog.json");
    let impact = impact_json(&repo, &["--catalog", &catalog]);
    let class = named(&impact["ec2nodeclasses"], "default");
    let prices: Vec<&Value> = class["affected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| &n["price_per_hour"])
        .collect();
    assert_eq!(prices, [&json!(0.2016), &json!(0.2016), &json!(0.08)]);
    let total = class["price_per_hour"].as_f64().unwrap();
    assert!((total - 0.4832).abs() < 1e-9, "{total}");
    assert_eq!(class["unpriced"], 0);
}

#[test]
fn a_missing_snapshot_is_an_error_with_a_hint() {
    let repo = changed(|c| c.replacen("    cpu: 16\n", "    cpu: 8\n", 1));
    let out = repo.diff(&[
        "--from",
        "HEAD~1",
        "--impact",
        "--snapshot",
        "/nonexistent/cluster.yaml",
    ]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr
            .starts_with("error: snapshot: cannot read /nonexistent/cluster.yaml: "),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("hint: write a snapshot with `dovetail snapshot --out-file FILE`"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_malformed_snapshot_is_an_error_at_its_file_and_line() {
    let repo = changed(|c| c.replacen("    cpu: 16\n", "    cpu: 8\n", 1));
    let malformed = fixture("malformed.yaml");
    let out = repo.diff(&["--from", "HEAD~1", "--impact", "--snapshot", &malformed]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr
            .starts_with(&format!("{malformed}:6:13: error: unclosed bracket '['\n")),
        "{}",
        out.stderr
    );

    // A NodeClaim that does not match its type, in a multi-document file.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: a\n---\napiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: c\nspec:\n  requirements: oops\n",
    )
    .unwrap();
    let bad = bad.to_str().unwrap();
    let out = repo.diff(&["--from", "HEAD~1", "--impact", "--snapshot", bad]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .starts_with(&format!("{bad}:6:1: error: NodeClaim/c: ")),
        "{}",
        out.stderr
    );
}

#[test]
fn impact_needs_a_node_set_and_a_valid_replacement_time() {
    let repo = changed(|c| c.replacen("    cpu: 16\n", "    cpu: 8\n", 1));
    let out = repo.diff(&["--from", "HEAD~1", "--impact"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.starts_with(
            "error: --impact needs the cluster's nodes: --snapshot FILE or --cluster\nhint: "
        ),
        "{}",
        out.stderr
    );
    let snapshot = fixture("snapshot.yaml");
    let out = repo.diff(&["--from", "HEAD~1", "--snapshot", &snapshot]);
    assert_eq!(out.code, 2, "--snapshot requires --impact: {}", out.stderr);
    let out = run_impact(&repo, &["--replacement-time", "soon"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("--replacement-time: invalid duration \"soon\""),
        "{}",
        out.stderr
    );
}
