//! NodeOverlays and the `NodeOverlay` feature gate, end to end: the same
//! repository (tests/scenarios/overlay/repo: a NodePool of c6i and m6i, an
//! overlay halving m6i's price, and a second overlay of the same weight
//! that conflicts with it) through `dovetail simulate` with the gate on and
//! off, `plan`, and `validate`. Karpenter v1.14.1's own cases
//! (pkg/controllers/nodeoverlay/) are ported beside the code, in
//! `model::overlay`'s tests, named after their It()s.

use serde_json::Value;

use crate::disruption::{array, report};
use crate::support::dovetail;

const REPO: &str = "tests/scenarios/overlay/repo";
const CATALOG: &str = "src/world/ec2/sim-catalog.json";
const PODS: &str = "tests/scenarios/overlay/pods.yaml";

fn types(r: &Value) -> Vec<&str> {
    array(&r["nodes"])
        .iter()
        .map(|n| n["instance_type"].as_str().unwrap())
        .collect()
}

#[test]
fn an_overlay_that_makes_a_family_50_percent_cheaper_changes_what_is_launched() {
    let off = report("tests/scenarios/overlay/off.yaml");
    let on = report("tests/scenarios/overlay/on.yaml");
    // At EC2's prices c6i is cheaper; at half price m6i is.
    assert!(!types(&off).is_empty());
    assert!(
        types(&off).iter().all(|t| t.starts_with("c6i.")),
        "{:?}",
        types(&off)
    );
    assert!(!types(&on).is_empty());
    assert!(
        types(&on).iter().all(|t| t.starts_with("m6i.")),
        "{:?}",
        types(&on)
    );
    // Every pod runs either way.
    for r in [&off, &on] {
        assert_eq!(r["summary"]["pods_pending"], 0, "{}", r["summary"]);
    }
    // The lower bound sees the overlaid catalog too.
    let bound = |r: &Value| r["summary"]["lower_bound_price_per_hour"].as_f64().unwrap();
    assert!(
        bound(&on) < bound(&off),
        "{} !< {}",
        bound(&on),
        bound(&off)
    );
    // The conflicting overlay is reported, once, and only with the gate on.
    let conflicts = |r: &Value| {
        array(&r["events"])
            .iter()
            .filter(|e| e["object"] == "NodeOverlay/a-conflicting-discount")
            .filter(|e| e["reason"] == "Conflict")
            .count()
    };
    assert_eq!(conflicts(&on), 1);
    assert_eq!(conflicts(&off), 0);
}

fn plan(gates: &[&str]) -> Value {
    let mut args = vec![
        "plan",
        REPO,
        "--worktree",
        "--catalog",
        CATALOG,
        "--pods",
        PODS,
        "-o",
        "json",
    ];
    args.extend_from_slice(gates);
    let out = dovetail(&args);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

#[test]
fn plan_launches_the_overlaid_family_only_under_the_gate() {
    let first_types = |v: &Value| -> Vec<String> {
        array(&v["nodeclaims"])
            .iter()
            .map(|c| c["instance_types"][0].as_str().unwrap().to_string())
            .collect()
    };
    let off = plan(&[]);
    let on = plan(&["--feature-gates", "NodeOverlay=true"]);
    assert!(
        first_types(&off).iter().all(|t| t.starts_with("c6i.")),
        "{off}"
    );
    assert!(
        first_types(&on).iter().all(|t| t.starts_with("m6i.")),
        "{on}"
    );
    // The claims' prices are the overlaid ones: m6i.xlarge at half its
    // $0.192/h.
    let price = |v: &Value| v["price_per_hour"].as_f64().unwrap();
    assert!((price(&on) - 2.0 * 0.096).abs() < 1e-6, "{}", price(&on));
    assert!((price(&off) - 2.0 * 0.17).abs() < 1e-6, "{}", price(&off));
}

#[test]
fn plan_says_which_overlays_it_leaves_out_and_why() {
    let out = dovetail(&[
        "plan",
        REPO,
        "--worktree",
        "--catalog",
        CATALOG,
        "--pods",
        PODS,
    ]);
    assert!(
        out.stderr
            .contains("are not applied: the NodeOverlay feature gate is off"),
        "{}",
        out.stderr
    );
    let out = dovetail(&[
        "plan",
        REPO,
        "--worktree",
        "--catalog",
        CATALOG,
        "--pods",
        PODS,
        "--feature-gates",
        "NodeOverlay=true",
    ]);
    assert!(
        out.stderr.contains(
            "warning: NodeOverlay a-conflicting-discount is not applied (Conflict): conflict with another overlay"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn validate_warns_that_overlays_are_inactive_while_the_gate_is_off() {
    let out = dovetail(&["validate", REPO, "--worktree"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(
            "warning: NodeOverlay/m6i-savings-plan: NodeOverlay is not applied to instance types: the NodeOverlay feature gate is off"
        ),
        "{}",
        out.stdout
    );
    let on = dovetail(&[
        "validate",
        REPO,
        "--worktree",
        "--strict",
        "--feature-gates",
        "NodeOverlay=true",
    ]);
    assert_eq!(on.code, 0, "{}{}", on.stdout, on.stderr);
}
