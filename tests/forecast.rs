//! `dovetail diff --forecast` end to end. Each test makes its snapshot as a
//! user would, with `dovetail simulate --snapshot-out` on the scenario
//! `tests/fixtures/forecast/cluster.yaml` (12 replicas of `shop/web` at
//! 1.5 CPU and 2 GiB behind a PodDisruptionBudget, and a bare pod, on
//! on-demand `m` nodes of NodePool `general`, budget one node), then
//! forecasts a change committed to a git repository holding the same
//! configuration.

use serde_json::Value;

use crate::diff::Repo;
use crate::support::{Output, dovetail, root};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(root().join("tests/fixtures/forecast").join(name)).unwrap()
}

/// The snapshot of the fixture cluster after its run, in `dir`.
fn snapshot(dir: &tempfile::TempDir) -> String {
    snapshot_of(dir, &root().join("tests/fixtures/forecast/cluster.yaml"))
}

/// The snapshot of `scenario`'s cluster after its run, in `dir`.
fn snapshot_of(dir: &tempfile::TempDir, scenario: &std::path::Path) -> String {
    let path = dir.path().join("snapshot.json");
    let out = dovetail(&[
        "simulate",
        scenario.to_str().unwrap(),
        "--output",
        "json",
        "--snapshot-out",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    path.to_str().unwrap().to_string()
}

/// A repository with the fixture configuration, then `change` to
/// `config/FILE` in a second commit.
fn changed(file: &str, change: impl Fn(&str) -> String) -> Repo {
    let mut repo = Repo::new();
    for f in ["default.yaml", "general.yaml"] {
        repo.write(&format!("config/{f}"), &fixture(&format!("config/{f}")));
    }
    repo.commit("base");
    let old = fixture(&format!("config/{file}"));
    let new = change(&old);
    assert_ne!(new, old, "the change must change the file");
    repo.write(&format!("config/{file}"), &new);
    repo.commit("change");
    repo
}

fn forecast(repo: &Repo, snapshot: &str, extra: &[&str]) -> Output {
    let config = format!("{}/config", repo.path());
    let mut args = vec![
        "diff",
        &config,
        "--from",
        "HEAD~1",
        "--to",
        "HEAD",
        "--forecast",
        "--snapshot",
        snapshot,
        "--for",
        "6h",
    ];
    args.extend_from_slice(extra);
    dovetail(&args)
}

/// The forecast of the JSON output, after checking the exit code.
fn forecast_json(repo: &Repo, snapshot: &str, extra: &[&str], code: u8) -> Value {
    let mut args = vec!["--output", "json"];
    args.extend_from_slice(extra);
    let out = forecast(repo, snapshot, &args);
    assert_eq!(out.code, code, "{}{}", out.stdout, out.stderr);
    let doc: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    doc["forecast"].clone()
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn disrupted(side: &Value, reason: &str) -> u64 {
    side["disruptions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["reason"] == reason)
        .map(|d| d["nodes"].as_u64().unwrap())
        .sum()
}

#[test]
fn pinning_al2023_replaces_every_node_of_the_class_paced_by_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot(&dir);
    let repo = changed("default.yaml", |c| {
        c.replace("al2023@latest", "al2023@v20250601")
    });
    let f = forecast_json(&repo, &snap, &[], 1);
    let nodes = f["nodes"].as_u64().unwrap();
    assert!(nodes >= 3, "the fixture runs on several nodes: {f}");
    let (a, b) = (&f["a"], &f["b"]);
    assert_eq!(disrupted(a, "Drifted"), 0, "A keeps its images: {a}");
    assert_eq!(
        disrupted(b, "Drifted"),
        nodes,
        "B replaces every node of the class: {b}"
    );
    // One node at a time (budget "1"): each replacement launches, the old
    // node drains, then the next; the last is gone well after
    // (nodes - 1) launches.
    let last = num(&b["last_drift_replaced_seconds"]);
    assert!(
        last >= (nodes - 1) as f64 * 45.0,
        "paced by the budget: {b}"
    );
    assert!(last < 6.0 * 3600.0);
    // Replacements launch before the drain: no pod waits longer than a launch.
    assert!(num(&b["max_pending_seconds"]) <= 45.0 + 15.0, "{b}");
    assert_eq!(b["pods_pending_at_end"], 0, "{b}");
    assert!(b["unschedulable"].as_array().unwrap().is_empty());
    assert!(a["last_drift_replaced_seconds"].is_null());
    // The pages to attach: each side's report and both fleets overlaid.
    let reports = dir.path().join("reports");
    let out = forecast(
        &repo,
        &snap,
        &[
            "-o",
            "markdown",
            "--forecast-reports",
            reports.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stdout.contains("forecast.html` (both fleets overlaid)"),
        "{}",
        out.stdout
    );
    let page = std::fs::read_to_string(reports.join("forecast.html")).unwrap();
    for id in ["chart-price", "chart-nodes", "chart-pending"] {
        assert!(page.contains(&format!("id=\"{id}\"")), "{id}");
    }
    assert!(page.contains("A: HEAD~1") && page.contains("B: HEAD"));
    for f in ["a.json", "b.json", "a.html", "b.html"] {
        assert!(reports.join(f).is_file(), "{f}");
    }
    // A window that ends mid-drift says so.
    let config = format!("{}/config", repo.path());
    let short = dovetail(&[
        "diff",
        &config,
        "--from",
        "HEAD~1",
        "--to",
        "HEAD",
        "--forecast",
        "--snapshot",
        &snap,
        "--for",
        "30s",
        "--feature-gates",
        "SpotToSpotConsolidation=true",
        "-o",
        "json",
    ]);
    assert_eq!(short.code, 1, "{}", short.stderr);
    let doc: Value = serde_json::from_str(&short.stdout).unwrap();
    assert_eq!(
        doc["forecast"]["b"]["drift_in_progress"], 1,
        "{}",
        short.stdout
    );
    let b_report: Value =
        serde_json::from_str(&std::fs::read_to_string(reports.join("b.json")).unwrap()).unwrap();
    assert_eq!(
        b_report["summary"]["disruptions_by_reason"]["Drifted"],
        nodes
    );
}

#[test]
fn a_cpu_limit_below_usage_leaves_the_scale_up_unschedulable_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot(&dir);
    let repo = changed("general.yaml", |c| c.replace("cpu: \"200\"", "cpu: \"8\""));
    let f = forecast_json(&repo, &snap, &["--scale", "deployment/shop/web=16@1h"], 1);
    let (a, b) = (&f["a"], &f["b"]);
    assert_eq!(
        a["pods_pending_at_end"], 0,
        "A has room for the scale-up: {a}"
    );
    assert_eq!(
        b["pods_pending_at_end"], 4,
        "B has none for 4 more pods: {b}"
    );
    let limits = b["limits_reached"].as_array().unwrap();
    assert_eq!(limits.len(), 1, "{b}");
    assert_eq!(limits[0]["nodepool"], "general");
    assert!(
        limits[0]["limit"].as_str().unwrap().contains("cpu"),
        "{limits:?}"
    );
    assert_eq!(limits[0]["pods"], 4);
    let reasons = b["unschedulable"].as_array().unwrap();
    assert!(
        reasons
            .iter()
            .all(|u| u["reason"].as_str().unwrap().contains("would exceed limit")),
        "{reasons:?}"
    );
    assert_eq!(f["scales"][0]["replicas"], 16);
    // The markdown for the pull request says so, bold where B is worse.
    let out = forecast(
        &repo,
        &snap,
        &["--scale", "deployment/shop/web=16@1h", "-o", "markdown"],
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("| pods pending at the end | 0 | **4** | **+4** |"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("NodePool `general` reached its limit cpu"),
        "{}",
        out.stdout
    );
}

#[test]
fn widening_instance_categories_forecasts_a_lower_price() {
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot(&dir);
    let repo = changed("general.yaml", |c| {
        c.replace("values: [\"m\"]", "values: [\"c\", \"m\", \"r\"]")
    });
    let f = forecast_json(&repo, &snap, &[], 1);
    let (a, b) = (&f["a"], &f["b"]);
    assert!(
        num(&b["price_per_hour"]) < num(&a["price_per_hour"]),
        "B may use cheaper c nodes: {a} {b}"
    );
    assert!(num(&b["cost_usd"]) < num(&a["cost_usd"]));
    assert!(disrupted(b, "Underutilized") > 0, "{b}");
    assert_eq!(b["pods_pending_at_end"], 0);
}

#[test]
fn identical_sides_forecast_the_same_and_exit_0_byte_for_byte_each_time() {
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot(&dir);
    let repo = changed("general.yaml", |c| {
        c.replace("cpu: \"200\"", "cpu: \"300\"")
    });
    let config = format!("{}/config", repo.path());
    // HEAD against itself, for 2 hours.
    let same = |format: &str| {
        dovetail(&[
            "diff",
            &config,
            "--from",
            "HEAD",
            "--to",
            "HEAD",
            "--forecast",
            "--snapshot",
            &snap,
            "--for",
            "2h",
            "-o",
            format,
        ])
    };
    let first = same("markdown");
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    assert!(
        first.stdout.contains("Both sides forecast the same."),
        "{}",
        first.stdout
    );
    assert_eq!(
        same("markdown").stdout,
        first.stdout,
        "the same inputs, the same bytes"
    );
    let json = same("json");
    let doc: Value = serde_json::from_str(&json.stdout).unwrap();
    let mut a = doc["forecast"]["a"].clone();
    let mut b = doc["forecast"]["b"].clone();
    a["label"] = Value::Null;
    b["label"] = Value::Null;
    assert_eq!(a, b);
    // A real change gives the same bytes on a second run too.
    let text = || forecast(&repo, &snap, &[]);
    let once = text();
    assert_eq!(once.code, 1, "{}", once.stderr);
    assert_eq!(text().stdout, once.stdout);
}

#[test]
fn snapshot_out_writes_what_dovetail_snapshot_writes() {
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot(&dir);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&snap).unwrap()).unwrap();
    assert_eq!(
        (doc["apiVersion"].as_str(), doc["kind"].as_str()),
        (Some("v1"), Some("List"))
    );
    let kinds: Vec<&str> = doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    let mut order: Vec<&str> = kinds.clone();
    order.dedup();
    assert_eq!(
        order,
        [
            "Node",
            "Pod",
            "NodeClaim",
            "NodePool",
            "EC2NodeClass",
            "PodDisruptionBudget",
            "Deployment"
        ],
        "in the order of `dovetail snapshot`"
    );
    assert!(
        doc["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["metadata"].get("managedFields").is_none())
    );
    // plan reads it as it reads a live cluster's.
    let pods = dir.path().join("pending.yaml");
    std::fs::write(
        &pods,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop}\nspec:\n  containers: [{name: c, image: i, resources: {requests: {cpu: 100m}}}]\n",
    )
    .unwrap();
    let repo = changed("general.yaml", |c| {
        c.replace("cpu: \"200\"", "cpu: \"300\"")
    });
    let config = std::path::PathBuf::from(format!("{}/config", repo.path()));
    let catalog = root().join("src/world/ec2/sim-catalog.json");
    let out = dovetail(&[
        "plan",
        config.to_str().unwrap(),
        "--catalog",
        catalog.to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
        "--snapshot",
        &snap,
        "-o",
        "json",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let plan: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        plan["existing_placements"].as_array().unwrap().len(),
        1,
        "{plan}"
    );
}

#[test]
fn a_forecast_without_a_cluster_or_with_an_unknown_deployment_is_refused() {
    let repo = changed("general.yaml", |c| c.replace("cpu: \"200\"", "cpu: \"8\""));
    let config = format!("{}/config", repo.path());
    let out = dovetail(&["diff", &config, "--from", "HEAD~1", "--forecast"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("--forecast needs the cluster to start from"),
        "{}",
        out.stderr
    );
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot(&dir);
    // Each refused with exit 2, and the message names what is wrong.
    for (args, says) in [
        (
            ["--scale", "deployment/shop/nope=3@1h"],
            "deployment/shop/nope",
        ),
        (
            ["--scale", "deployment/shop/web=3@7h"],
            "after the window's end",
        ),
        (
            ["--scale", "web=3"],
            "deployment/NAMESPACE/NAME=REPLICAS@OFFSET",
        ),
        (["--feature-gates", "Nope=true"], "SpotToSpotConsolidation"),
    ] {
        let out = forecast(&repo, &snap, &args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stdout);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
}

/// The fixture's snapshot, with the PodDisruptionBudget of shop/web
/// allowing no disruption at all.
fn snapshot_pdb_allowing_none(dir: &tempfile::TempDir) -> String {
    let snap = snapshot(dir);
    let mut list: Value = serde_json::from_str(&std::fs::read_to_string(&snap).unwrap()).unwrap();
    let pdb = list["items"]
        .as_array_mut()
        .expect("a v1/List")
        .iter_mut()
        .find(|o| o["kind"] == "PodDisruptionBudget")
        .expect("the fixture's PDB");
    pdb["spec"]["maxUnavailable"] = 0.into();
    pdb["status"]["disruptionsAllowed"] = 0.into();
    std::fs::write(&snap, serde_json::to_string(&list).unwrap()).unwrap();
    snap
}

#[test]
fn a_drift_a_pdb_blocks_lists_the_blocked_nodes_by_blocker() {
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot_pdb_allowing_none(&dir);
    // A tag on the EC2NodeClass drifts every node.
    let repo = changed("default.yaml", |c| format!("{c}  tags:\n    team: shop\n"));
    let reports = dir.path().join("reports");
    let out = forecast(
        &repo,
        &snap,
        &[
            "-o",
            "markdown",
            "--forecast-reports",
            reports.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    // Each side's report carries the Events that say why.
    let b: Value =
        serde_json::from_str(&std::fs::read_to_string(reports.join("b.json")).unwrap()).unwrap();
    let blocked: Vec<&Value> = b["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["reason"] == "DisruptionBlocked"
                && e["message"].as_str().unwrap().starts_with("Drifted: ")
        })
        .collect();
    assert_eq!(blocked.len(), 3, "{}", b["events"]);
    // ...and lists the nodes still blocked at the end, with their blocker.
    let at_end: Vec<(&str, &str)> = b["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["reason"] == "Drifted")
        .map(|x| (x["node"].as_str().unwrap(), x["blocker"].as_str().unwrap()))
        .collect();
    assert_eq!(at_end.len(), 3, "{}", b["blocked"]);
    assert!(
        at_end
            .iter()
            .all(|(_, why)| *why == "PodDisruptionBudget shop/web allows no disruption now")
    );
    let md = &out.stdout;
    assert!(!md.contains("Both sides forecast the same"), "{md}");
    assert!(
        md.contains("Drifted node(s) cannot be disrupted: PodDisruptionBudget shop/web allows no disruption now"),
        "{md}"
    );
    // A's nodes are underutilized and already held by the PDB; B adds the
    // drift of all three.
    assert!(
        md.contains("| nodes blocked from disruption | 3 | **6** | **+3** |"),
        "{md}"
    );
}

#[test]
fn expired_nodes_whose_drain_a_pdb_holds_are_listed_as_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot_pdb_allowing_none(&dir);
    // Every NodeClaim expires an hour after its creation, within the window.
    let mut list: Value = serde_json::from_str(&std::fs::read_to_string(&snap).unwrap()).unwrap();
    let mut claims = 0;
    for o in list["items"].as_array_mut().unwrap() {
        if o["kind"] == "NodeClaim" {
            o["spec"]["expireAfter"] = "1h".into();
            claims += 1;
        }
    }
    assert_eq!(claims, 3);
    std::fs::write(&snap, serde_json::to_string(&list).unwrap()).unwrap();
    let repo = changed("default.yaml", |c| format!("{c}  tags:\n    team: shop\n"));
    // B's drift is blocked too, so the sides differ (exit 1).
    let f = forecast_json(&repo, &snap, &[], 1);
    for side in ["a", "b"] {
        let groups = f[side]["blocked"].as_array().unwrap();
        let expired: Vec<&Value> = groups.iter().filter(|g| g["reason"] == "Expired").collect();
        assert_eq!(expired.len(), 1, "{side}: {}", f[side]["blocked"]);
        assert_eq!(
            expired[0]["blocker"], "its drain is held by PodDisruptionBudget shop/web",
            "{side}"
        );
        assert_eq!(
            expired[0]["nodes"].as_array().unwrap().len(),
            3,
            "{side}: {}",
            expired[0]
        );
    }
}

/// Issue 43: a forecast that shows a reservation used up. The snapshot's
/// cluster runs 2 nodes in the team's reservation (its EC2NodeClass's
/// status lists it); the reservation holds 3 (`--reservation`). Side B
/// lets the NodePool grow past its limit while the Deployment scales to 5
/// replicas: the third reserved node uses the reservation up, and the
/// other two launch on demand.
#[test]
fn a_forecast_shows_a_reservation_used_up() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = root().join("tests/scenarios/reservations/used-up.yaml");
    let text = std::fs::read_to_string(&scenario).unwrap();
    // Two replicas, and a short run: the reservation is still active.
    let short = text
        .replace("replicas: 3", "replicas: 2")
        .replace(
            "  - advance: 1h\n  - advance: 1h30m\nuntil: 3h\n",
            "until: 10m\n",
        )
        .replace(
            "config: repo",
            &format!(
                "config: {}",
                root().join("tests/scenarios/reservations/repo").display()
            ),
        );
    assert_ne!(short, text);
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, short).unwrap();
    let snap = snapshot_of(&dir, &file);
    let config =
        std::fs::read_to_string(root().join("tests/scenarios/reservations/repo/config.yaml"))
            .unwrap();
    let mut repo = Repo::new();
    repo.write("config/config.yaml", &config);
    repo.commit("base");
    repo.write(
        "config/config.yaml",
        &config.replace(
            "values: [\"m7i.xlarge\"]",
            "values: [\"m7i.xlarge\", \"m7i.2xlarge\"]",
        ),
    );
    repo.commit("change");
    let reservation = "cr-0a1b2c3d4e5f60718";
    let count = format!("{reservation}=3");
    let f = forecast_json(
        &repo,
        &snap,
        &[
            "--reservation",
            &count,
            "--scale",
            "deployment/default/trainer=5@30m",
        ],
        1,
    );
    for side in [&f["a"], &f["b"]] {
        let uses = side["reservations"].as_array().expect("reservations");
        assert_eq!(uses.len(), 1, "{side}");
        let u = &uses[0];
        assert_eq!(u["id"], reservation);
        assert_eq!(u["instances"], 3);
        assert_eq!(u["in_use_at_end"], 3, "{u}");
        let after = num(&u["used_up_after_seconds"]);
        assert!(
            (1800.0..1900.0).contains(&after),
            "used up once scaled: {after}"
        );
        assert_eq!(side["pods_pending_at_end"], 0, "{side}");
    }
    // The text says so.
    let out = forecast(
        &repo,
        &snap,
        &[
            "--reservation",
            &count,
            "--scale",
            "deployment/default/trainer=5@30m",
        ],
    );
    assert!(
        out.stdout.contains(&format!(
            "capacity reservation {reservation} (m7i.xlarge in us-east-1a): 3 of 3 instance(s) in use at the end; used up after"
        )),
        "{}",
        out.stdout
    );
    // A reservation the snapshot does not hold is refused.
    let out = forecast(&repo, &snap, &["--reservation", "cr-0000000000000000=2"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("no EC2NodeClass in the snapshot holds this reservation"),
        "{}",
        out.stderr
    );
}
