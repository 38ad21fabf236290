//! The Helm charts, `charts/dovetail` and `charts/dovetail-crd`, checked by
//! the real helm (v3.21.4, built in `testbed/`): `helm lint --strict`; the
//! values schema refuses a typo; the default values render the objects of
//! the kustomize base (`deploy/`) and its components; every key of
//! Karpenter v1.14.1's chart values is in the README's table, as used,
//! mapped or ignored; a Karpenter user's values (Karpenter's values.yaml
//! with the flags of its v1.14 getting-started guide) install dovetail on
//! the testbed's API server, upgrade and uninstall, the ignored keys
//! reported, with the controller running as the chart's ServiceAccount and
//! provisioning; and checkov's findings on the rendered chart are the ones
//! `docs/checkov.md` lists.
//!
//! Karpenter's chart values are read at test time from the Go module
//! github.com/aws/karpenter-provider-aws at [`KARPENTER_TAG`], which
//! `go mod download` fetches from the Go module proxy and checks against
//! the checksum database ([`karpenter_values`]); none is copied here. The
//! getting-started guide is in no module: the few facts the test takes
//! from it are written below ([`GUIDE_ENV`], [`GUIDE_SETS`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::support::root;
use crate::testbed::bin;

/// Karpenter's release whose chart values the chart takes.
const KARPENTER_TAG: &str = "v1.14.1";
/// Karpenter's Go module, whose tree at [`KARPENTER_TAG`] holds
/// `charts/karpenter/values.yaml`.
const KARPENTER_MODULE: &str = "github.com/aws/karpenter-provider-aws";

// Facts of Karpenter's v1.14 getting-started guide, from
// aws/karpenter-provider-aws at commit
// 1d927085dd81a9df9301e613f371dac5b4d16bfe (main, 2026-08-21),
// website/content/en/v1.14/getting-started/getting-started-with-karpenter/scripts/:
// GUIDE_ENV from step01-config.sh (the variable step08 uses that the test
// does not set itself), GUIDE_SETS from step08-apply-helm-chart.sh (its
// `--set` flags, in order). The website is in no Go module, so they are
// written here rather than read.

/// step01-config.sh: `VARIABLE=value`.
const GUIDE_ENV: &[&str] = &["ENABLE_ZONAL_SHIFT=true"];
/// step08-apply-helm-chart.sh: `key=value`, `${VARIABLE}` as written.
const GUIDE_SETS: &[&str] = &[
    "settings.clusterName=${CLUSTER_NAME}",
    "settings.interruptionQueue=${CLUSTER_NAME}",
    "settings.enableZonalShift=${ENABLE_ZONAL_SHIFT}",
    "controller.resources.requests.cpu=1",
    "controller.resources.requests.memory=1Gi",
    "controller.resources.limits.cpu=1",
    "controller.resources.limits.memory=1Gi",
];

/// [`crate::missing`], as an `Option` for `?`.
fn unavailable<T>(what: &str) -> Option<T> {
    crate::missing(what);
    None
}

/// The extracted tree of [`KARPENTER_MODULE`] at [`KARPENTER_TAG`]:
/// the "Dir" of `go mod download -json MODULE@TAG`, run in an empty
/// directory (no go.mod, no workspace), once per test process. `None`
/// (said) outside CI when go is missing or the download fails.
pub(crate) fn karpenter_module() -> Option<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let module = format!("{KARPENTER_MODULE}@{KARPENTER_TAG}");
        let command = format!("go mod download -json {module}");
        let empty = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
        let out = Command::new("go")
            .args(["mod", "download", "-json", &module])
            .current_dir(empty.path())
            .env("GOWORK", "off")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                format!(
                    "`{command}` could not run ({e}): Karpenter's chart values are read from \
                     its Go module; install Go (1.26 or newer, as the testbed needs)"
                )
            })?;
        // With -json, go reports a module's failure in the JSON's "Error"
        // as well as by its exit status.
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let failed = |why: &str| {
            format!(
                "`{command}` failed ({why}): {}{}",
                report["Error"].as_str().unwrap_or_default(),
                String::from_utf8_lossy(&out.stderr)
            )
        };
        if !out.status.success() || report.get("Error").is_some() {
            return Err(failed(&out.status.to_string()));
        }
        let dir = PathBuf::from(report["Dir"].as_str().ok_or_else(|| failed("no \"Dir\""))?);
        if !dir.join("charts/karpenter/values.yaml").is_file() {
            return Err(failed(&format!(
                "no charts/karpenter/values.yaml in {}",
                dir.display()
            )));
        }
        Ok(dir)
    });
    match dir {
        Ok(dir) => Some(dir.clone()),
        Err(what) => unavailable(what),
    }
}

/// Karpenter v1.14.1's chart values.yaml, from its module's tree.
fn karpenter_values(module: &Path) -> Value {
    let path = module.join("charts/karpenter/values.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("Karpenter's values.yaml ({}): {e}", path.display()));
    serde_saphyr::from_str(&text).expect("Karpenter's values.yaml")
}

/// The testbed's helm, with its own configuration, cache and data
/// directories (nothing of the user's is read or written).
fn helm_command(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin().join("helm"));
    cmd.args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .current_dir(root());
    cmd
}

fn helm(args: &[&str]) -> Output {
    let home = tempfile::tempdir().expect("a helm home");
    helm_command(home.path(), args)
        .output()
        .expect("the testbed's helm runs")
}

/// helm's stdout, failing the test with its stderr when it fails.
fn helm_ok(args: &[&str]) -> String {
    let out = helm(args);
    assert!(
        out.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn documents(text: &str, what: &str) -> Vec<Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{what}: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `helm template dovetail charts/dovetail --namespace dovetail
/// --include-crds ARGS`.
fn template(args: &[&str]) -> Vec<Value> {
    let mut all = vec![
        "template",
        "dovetail",
        "charts/dovetail",
        "--namespace",
        "dovetail",
        "--include-crds",
    ];
    all.extend_from_slice(args);
    documents(&helm_ok(&all), "helm template")
}

/// `kubectl kustomize` (the testbed's kubectl) of `deploy/` with the
/// named components of `deploy/components/`.
fn kustomize(components: &[&str]) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("tempdir");
    let overlay = dir.path();
    crate::support::deploy_overlay(overlay, components);
    let out = Command::new(bin().join("kubectl"))
        .arg("kustomize")
        .arg(overlay)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    documents(
        &String::from_utf8(out.stdout).expect("UTF-8"),
        "kubectl kustomize",
    )
}

/// `Kind/namespace/name`.
fn key(doc: &Value) -> String {
    format!(
        "{}/{}/{}",
        doc["kind"].as_str().unwrap_or_default(),
        doc["metadata"]["namespace"].as_str().unwrap_or_default(),
        doc["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Labels Helm's conventions add (the chart, the release, the version, the
/// manager) and the pods' settings checksum: removed wherever they are,
/// labels, selectors and annotations alike.
const HELM_ONLY: [&str; 5] = [
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "checksum/settings",
];

fn strip(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for k in HELM_ONLY {
                map.remove(k);
            }
            for child in map.values_mut() {
                strip(child);
            }
            // A labels or annotations map left empty is no map.
            for k in ["labels", "annotations"] {
                if map
                    .get(k)
                    .is_some_and(|m| m.as_object().is_some_and(|m| m.is_empty()))
                {
                    map.remove(k);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// The objects as the comparison sees them, by `Kind/namespace/name`:
/// Helm's own labels gone (and every object's `app.kubernetes.io/name`
/// label, which the chart puts on all and the base on two), kustomize's
/// hash suffix of the generated ConfigMap's name gone.
fn normalized(docs: &[Value]) -> BTreeMap<String, Value> {
    let generated = docs
        .iter()
        .filter(|d| d["kind"] == "ConfigMap")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .find(|n| n.starts_with("dovetail-settings-"))
        .map(|n| format!("\"{n}\""));
    docs.iter()
        .map(|doc| {
            let mut doc = doc.clone();
            if let Some(name) = &generated {
                let text = doc.to_string().replace(name, "\"dovetail-settings\"");
                doc = serde_json::from_str(&text).expect("JSON");
            }
            // (pointer_mut: indexing would insert a null where there is none)
            if let Some(labels) = doc
                .pointer_mut("/metadata/labels")
                .and_then(Value::as_object_mut)
            {
                labels.remove("app.kubernetes.io/name");
            }
            strip(&mut doc);
            (key(&doc), doc)
        })
        .collect()
}

/// Fails with a diff of every object that differs.
fn assert_same_objects(
    chart: &BTreeMap<String, Value>,
    base: &BTreeMap<String, Value>,
    what: &str,
) {
    let names = |m: &BTreeMap<String, Value>| m.keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(
        names(chart),
        names(base),
        "{what}: the chart and the base render different objects"
    );
    let mut diffs = String::new();
    for (k, c) in chart {
        let b = &base[k];
        if c != b {
            let (c, b) = (
                serde_json::to_string_pretty(c).expect("JSON"),
                serde_json::to_string_pretty(b).expect("JSON"),
            );
            diffs.push_str(&format!(
                "--- {k}\n{}",
                similar::TextDiff::from_lines(&b, &c)
                    .unified_diff()
                    .header("kustomize", "helm")
            ));
        }
    }
    assert!(diffs.is_empty(), "{what}: objects differ:\n{diffs}");
}

#[test]
fn the_charts_pass_helm_lint_strict() {
    for chart in ["charts/dovetail", "charts/dovetail-crd"] {
        let out = helm_ok(&["lint", "--strict", chart]);
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

/// A values file with a misspelt key, a key in the wrong place, a value of
/// the wrong type or one dovetail cannot honour does not render; the error
/// names each.
#[test]
fn a_values_file_with_a_typo_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        ("replica: 3\n", vec!["replica"]),
        (
            "settings:\n  clusterNmae: prod\n",
            vec!["/settings", "clusterNmae"],
        ),
        ("replicas: two\n", vec!["/replicas", "integer"]),
        (
            "serviceAccount:\n  anotations: {a: b}\n",
            vec!["/serviceAccount", "anotations"],
        ),
        (
            "settings:\n  featureGates:\n    reservedCapacity: false\n",
            vec!["/settings/featureGates/reservedCapacity"],
        ),
        (
            "settings:\n  batchIdleDuration: 500ms\n",
            vec!["/settings/batchIdleDuration"],
        ),
        (
            "controller:\n  image:\n    digest: latest\n",
            vec!["/controller/image/digest"],
        ),
    ];
    for (i, (values, names)) in cases.iter().enumerate() {
        let file = dir.path().join(format!("values-{i}.yaml"));
        std::fs::write(&file, values).expect("write");
        let out = helm(&[
            "template",
            "dovetail",
            "charts/dovetail",
            "-f",
            file.to_str().expect("UTF-8"),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{values:?} rendered");
        assert!(
            stderr.contains("schema"),
            "{values:?}: not the schema's error: {stderr}"
        );
        for name in names {
            assert!(
                stderr.contains(name),
                "{values:?}: the error does not name {name}: {stderr}"
            );
        }
    }
    // Karpenter's image in a Karpenter values file: refused by name.
    let out = helm(&[
        "template",
        "dovetail",
        "charts/dovetail",
        "--set",
        "controller.image.repository=public.ecr.aws/karpenter/controller",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("controller.image.repository is Karpenter's image"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `helm template` with the default values renders what `kubectl
/// kustomize deploy/` does (the CRDs included), but for what each tool
/// adds by convention: Helm's labels (`helm.sh/chart`,
/// `app.kubernetes.io/{instance,version,managed-by}`, and the name label
/// on every object), the pods' `checksum/settings` annotation, and
/// kustomize's hash suffix on the settings ConfigMap's name. The chart
/// does not create its namespace (Helm's `--create-namespace` does, or
/// the user): the base's Namespace has no counterpart. With the options
/// on (`serviceMonitor.enabled`, `config.prune`), the chart renders the
/// base with both components.
#[test]
fn the_default_values_render_the_kustomize_base() {
    let mut base = kustomize(&[]);
    let namespace = base
        .iter()
        .position(|d| d["kind"] == "Namespace")
        .expect("the base's Namespace");
    assert_eq!(base.remove(namespace)["metadata"]["name"], "dovetail");
    let chart = template(&[]);
    assert!(chart.iter().all(|d| d["kind"] != "Namespace"));
    assert_same_objects(&normalized(&chart), &normalized(&base), "default values");

    let mut base = kustomize(&["servicemonitor", "prune"]);
    base.retain(|d| d["kind"] != "Namespace");
    let chart = template(&[
        "--api-versions",
        "monitoring.coreos.com/v1",
        "--set",
        "serviceMonitor.enabled=true,config.prune=true",
    ]);
    assert_same_objects(
        &normalized(&chart),
        &normalized(&base),
        "with the ServiceMonitor and pruning",
    );

    // Without the Prometheus operator's API, no ServiceMonitor (as
    // Karpenter's chart).
    let chart = template(&["--set", "serviceMonitor.enabled=true"]);
    assert!(chart.iter().all(|d| d["kind"] != "ServiceMonitor"));
}

/// The chart's `crds/` and the CRD chart's files are `crds/`, file for
/// file; the CRD chart renders them, with `additionalAnnotations` added.
#[test]
fn the_crd_chart_renders_the_generated_crds() {
    let list = |dir: &Path| -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| {
                let path = e.expect("entry").path();
                (
                    path.file_name()
                        .expect("name")
                        .to_string_lossy()
                        .into_owned(),
                    std::fs::read(&path).expect("readable"),
                )
            })
            .collect()
    };
    let generated = list(&root().join("crds"));
    for copy in ["charts/dovetail/crds", "charts/dovetail-crd/files"] {
        assert!(
            list(&root().join(copy)) == generated,
            "{copy}/ is not crds/: `cp crds/*.yaml {copy}/`"
        );
    }
    let crds: BTreeMap<String, Value> = generated
        .iter()
        .flat_map(|(name, text)| documents(std::str::from_utf8(text).expect("UTF-8"), name))
        .map(|d| (key(&d), d))
        .collect();
    let rendered = |args: &[&str]| -> BTreeMap<String, Value> {
        let mut all = vec!["template", "dovetail-crd", "charts/dovetail-crd"];
        all.extend_from_slice(args);
        documents(&helm_ok(&all), "helm template")
            .into_iter()
            .map(|d| (key(&d), d))
            .collect()
    };
    assert!(rendered(&[]) == crds, "the CRD chart renders other CRDs");
    let annotated = rendered(&["--set", "additionalAnnotations.team=platform"]);
    assert_eq!(annotated.len(), crds.len());
    for (k, mut crd) in annotated {
        assert_eq!(crd["metadata"]["annotations"]["team"], "platform", "{k}");
        crd["metadata"]["annotations"]
            .as_object_mut()
            .expect("annotations")
            .remove("team");
        assert!(crd == crds[&k], "{k} differs beyond the annotation");
    }
}

/// `dashboards.enabled`: Karpenter's two dashboards, unchanged, one
/// ConfigMap each, labelled for Grafana's dashboard sidecar.
#[test]
fn the_dashboards_ship_as_configmaps_for_grafana_s_sidecar() {
    let chart = template(&["--set", "dashboards.enabled=true"]);
    let maps: Vec<&Value> = chart
        .iter()
        .filter(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect();
    assert_eq!(maps.len(), 2, "two dashboard ConfigMaps");
    let mut files = BTreeSet::new();
    for m in maps {
        assert_eq!(m["metadata"]["namespace"], "dovetail");
        let data = m["data"].as_object().expect("data");
        assert_eq!(data.len(), 1);
        let (file, text) = data.iter().next().expect("one file");
        let shipped: Value = serde_json::from_str(text.as_str().expect("text")).expect("JSON");
        let source: Value = serde_json::from_str(
            &std::fs::read_to_string(root().join("charts/dovetail/dashboards").join(file))
                .expect("the dashboard"),
        )
        .expect("JSON");
        assert!(shipped == source, "{file} is not shipped unchanged");
        files.insert(file.clone());
    }
    assert_eq!(
        files,
        BTreeSet::from([
            "karpenter-capacity-dashboard.json".to_string(),
            "karpenter-performance-dashboard.json".to_string()
        ])
    );
    let elsewhere = template(&[
        "--set",
        "dashboards.enabled=true,dashboards.namespace=monitoring",
    ]);
    assert_eq!(
        elsewhere
            .iter()
            .filter(|d| d["metadata"]["namespace"] == "monitoring")
            .count(),
        2
    );
    assert!(
        template(&[])
            .iter()
            .all(|d| d["metadata"]["labels"]["grafana_dashboard"].is_null())
    );
}

/// The keys of a values document, as the README's table names them: a
/// key is a leaf, or an object whose schema names no properties (a
/// Kubernetes object such as `affinity`, or a free map such as
/// `nodeSelector`).
fn value_keys(values: &Value, schema: &Value, prefix: &str, out: &mut Vec<String>) {
    let Some(map) = values.as_object() else {
        return;
    };
    for (k, v) in map {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let node = &schema["properties"][k];
        assert!(
            !node.is_null(),
            "charts/dovetail/values.schema.json has no {path}"
        );
        if node["properties"].is_object() && v.is_object() {
            value_keys(v, node, &path, out);
        } else {
            out.push(path);
        }
    }
}

/// The README's "Helm values" table: `| `key` | status ... | notes |`.
fn readme_table() -> BTreeMap<String, (String, String)> {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let section = readme
        .split("### Helm values: Karpenter's keys")
        .nth(1)
        .expect("README.md has a \"Helm values: Karpenter's keys\" section");
    let section = section.split("\n#").next().expect("the section");
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 3, "README.md: a row of three cells: {line}");
        let key = cells[0].trim_matches('`').to_string();
        let status = cells[1].split_whitespace().next().unwrap_or_default();
        assert!(
            ["used", "mapped", "ignored"].contains(&status),
            "README.md: {key} is {status:?}, not used, mapped or ignored"
        );
        let row = (status.to_string(), cells[2].to_string());
        assert!(
            rows.insert(key.clone(), row).is_none(),
            "README.md: {key} twice"
        );
    }
    rows
}

/// Every key of Karpenter v1.14.1's values.yaml is a row of the README's
/// table, and every row is such a key; the ignored ones are exactly the
/// chart's list (`karpenter-values.yaml`, which NOTES.txt reports from),
/// with the same reasons, and the schema's descriptions say so.
#[test]
fn every_key_of_karpenter_s_values_is_used_mapped_or_ignored_in_the_readme() {
    let Some(module) = karpenter_module() else {
        return;
    };
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("charts/dovetail/values.schema.json"))
            .expect("the schema"),
    )
    .expect("JSON");
    let mut keys = Vec::new();
    value_keys(&karpenter_values(&module), &schema, "", &mut keys);
    assert!(keys.len() >= 70, "{} keys", keys.len());
    let table = readme_table();
    let missing: Vec<&String> = keys.iter().filter(|k| !table.contains_key(*k)).collect();
    assert!(
        missing.is_empty(),
        "README.md's table lacks Karpenter's {missing:?}"
    );
    let extra: Vec<&String> = table.keys().filter(|k| !keys.contains(k)).collect();
    assert!(
        extra.is_empty(),
        "README.md's table has keys Karpenter's values.yaml has not: {extra:?}"
    );
    let ignored: BTreeMap<String, String> = serde_saphyr::from_str::<Value>(
        &std::fs::read_to_string(root().join("charts/dovetail/karpenter-values.yaml"))
            .expect("karpenter-values.yaml"),
    )
    .expect("YAML")["ignored"]
        .as_object()
        .expect("ignored")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("a reason").to_string()))
        .collect();
    let table_ignored: BTreeMap<String, String> = table
        .iter()
        .filter(|(_, (status, _))| status == "ignored")
        .map(|(k, (_, reason))| (k.clone(), reason.clone()))
        .collect();
    assert_eq!(
        table_ignored, ignored,
        "README.md's ignored rows are not charts/dovetail/karpenter-values.yaml"
    );
    for (k, reason) in &ignored {
        let mut node = &schema;
        for part in k.split('.') {
            node = &node["properties"][part];
        }
        assert_eq!(
            node["description"],
            format!("Ignored by dovetail: {reason}"),
            "values.schema.json: {k}"
        );
    }
    // The chart's defaults hold none of them: what NOTES.txt reports is
    // what the user's values set.
    let defaults: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root().join("charts/dovetail/values.yaml")).expect("values.yaml"),
    )
    .expect("YAML");
    for k in ignored.keys() {
        let pointer = format!("/{}", k.replace('.', "/"));
        assert!(
            defaults.pointer(&pointer).is_none(),
            "values.yaml sets the ignored {k}"
        );
    }
}

/// `${VAR}` expanded from `env`; an unknown variable fails the test.
fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut expanded = text.to_string();
    for (k, v) in env {
        expanded = expanded.replace(&format!("${{{k}}}"), v);
    }
    assert!(!expanded.contains("${"), "an unknown variable in {text:?}");
    expanded
}

/// What a Karpenter user who followed Karpenter's v1.14 getting-started
/// guide has: Karpenter v1.14.1's chart values, and the `--set` flags of
/// the guide's `helm upgrade --install karpenter` ([`GUIDE_SETS`], its
/// variables from [`GUIDE_ENV`], the cluster's name this test's). Written to
/// `dir/karpenter-values.yaml`; returns its path and the flags. Karpenter's
/// `controller.image` is left out: it is Karpenter's image (the chart
/// refuses it, by name).
fn karpenter_user_values(module: &Path, dir: &Path, cluster: &str) -> (PathBuf, Vec<String>) {
    let mut values = karpenter_values(module);
    values["controller"]
        .as_object_mut()
        .expect("controller")
        .remove("image")
        .expect("Karpenter's values set controller.image");
    let path = dir.join("karpenter-values.yaml");
    std::fs::write(&path, serde_json::to_string_pretty(&values).expect("JSON"))
        .expect("write the values");
    let mut env: BTreeMap<String, String> = GUIDE_ENV
        .iter()
        .map(|fact| {
            let (name, value) = fact.split_once('=').expect("VARIABLE=value");
            (name.to_string(), value.to_string())
        })
        .collect();
    env.insert("CLUSTER_NAME".into(), cluster.to_string());
    let sets = GUIDE_SETS.iter().map(|s| expand(s, &env)).collect();
    (path, sets)
}

/// A Karpenter user's values (Karpenter v1.14.1's values.yaml and the
/// v1.14 getting-started guide's flags) render, and `helm install` lists
/// the keys dovetail ignores, exactly the ones the values set.
#[test]
fn a_karpenter_values_file_renders_and_its_ignored_keys_are_listed() {
    let Some(module) = karpenter_module() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (values, sets) = karpenter_user_values(&module, dir.path(), "demo");
    let mut args = vec![
        "template".to_string(),
        "dovetail".into(),
        "charts/dovetail".into(),
        "-n".into(),
        "dovetail".into(),
        "-f".into(),
        values.display().to_string(),
    ];
    for s in &sets {
        args.extend(["--set".to_string(), s.clone()]);
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let docs = documents(&helm_ok(&argv), "helm template");
    let settings = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "dovetail-settings")
        .expect("the settings");
    assert_eq!(settings["data"]["DOVETAIL_CLUSTER_NAME"], "demo");
    assert_eq!(settings["data"]["DOVETAIL_INTERRUPTION_QUEUE"], "demo");
    assert_eq!(
        settings["data"]["DOVETAIL_VM_MEMORY_OVERHEAD_PERCENT"],
        "7.5"
    );
    // Karpenter's own defaults where they differ from dovetail's: the
    // PDB's name, the zone spread.
    assert!(
        docs.iter()
            .any(|d| d["kind"] == "PodDisruptionBudget" && d["metadata"]["name"] == "karpenter")
    );
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["topologySpreadConstraints"][0]["whenUnsatisfiable"],
        "DoNotSchedule"
    );
    // The guide's resources, not dovetail's defaults.
    assert_eq!(
        pod["containers"][0]["resources"]["requests"]["memory"],
        "1Gi"
    );
}

/// The NOTES of an install: the keys listed under "Ignored Karpenter
/// values", with their reasons.
fn reported_ignored(notes: &str) -> BTreeMap<String, String> {
    let Some(list) = notes.split("Ignored Karpenter values").nth(1) else {
        return BTreeMap::new();
    };
    list.lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.trim().split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `promtool check metrics` on a `/metrics` text: no problem reported.
pub fn promtool_check_metrics(text: &str, what: &str) {
    use std::io::Write;
    let mut child = Command::new(bin().join("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the testbed's promtool runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool finishes");
    assert!(
        out.status.success(),
        "promtool check metrics on {what}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The demo's final `/metrics` (every family the controller has,
/// populated) passes `promtool check metrics`: names, help, types, units.
#[test]
fn the_metrics_pass_promtool_check_metrics() {
    let demo = crate::support::demo_outputs();
    promtool_check_metrics(&demo.metrics, "the demo's /metrics");
}

/// checkov on the rendered chart: `None` (said) when checkov is not
/// installed outside CI.
fn checkov(docs: &[Value]) -> Option<Checkov> {
    let checkov = std::env::var_os("DOVETAIL_CHECKOV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("checkov"));
    // A directory whose path has no component starting with a dot:
    // checkov skips hidden directories (tempdir's default name is one).
    let dir = tempfile::Builder::new()
        .prefix("dovetail-checkov-")
        .tempdir()
        .expect("tempdir");
    let render = dir.path();
    let text: Vec<String> = docs
        .iter()
        .filter(|d| d["kind"] != "CustomResourceDefinition")
        .map(|d| serde_json::to_string(d).expect("JSON"))
        .collect();
    std::fs::write(render.join("chart.yaml"), text.join("\n---\n")).expect("write");
    let out = match Command::new(&checkov)
        // --skip-download: nothing is fetched (guidelines, severities).
        .args([
            "--framework",
            "kubernetes",
            "--skip-download",
            "--quiet",
            "--compact",
            "-o",
            "json",
            "-d",
        ])
        .arg(render)
        .env("BC_SKIP_MAPPING", "TRUE")
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return unavailable(&format!(
                "checkov is not installed ({}; .ci/run installs it into a virtualenv and sets \
                 DOVETAIL_CHECKOV)",
                checkov.display()
            ));
        }
        Err(e) => panic!("checkov: {e}"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "checkov's JSON: {e}\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(
        report["summary"]["parsing_errors"], 0,
        "checkov could not parse the render: {stdout}"
    );
    let passed = report["summary"]["passed"]
        .as_u64()
        .expect("summary.passed");
    // --quiet lists the failed checks only (none: no list).
    let failed: BTreeSet<(String, String)> = report["results"]["failed_checks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            (
                f["check_id"].as_str().expect("check_id").to_string(),
                f["resource"].as_str().expect("resource").to_string(),
            )
        })
        .collect();
    assert_eq!(
        report["summary"]["failed"].as_u64(),
        Some(failed.len() as u64),
        "{stdout}"
    );
    Some(Checkov { passed, failed })
}

/// What checkov found: how many checks passed, and the failed ones as
/// `(check, object)`.
struct Checkov {
    passed: u64,
    failed: BTreeSet<(String, String)>,
}

/// docs/checkov.md's counts: the `| RENDER | PASSED | FAILED |` row whose
/// first cell starts with `render`.
fn documented_counts(render: &str) -> (u64, u64) {
    let text = std::fs::read_to_string(root().join("docs/checkov.md")).expect("docs/checkov.md");
    let row = text
        .lines()
        .find(|l| l.starts_with(&format!("| {render}")))
        .unwrap_or_else(|| panic!("docs/checkov.md has no row for {render:?}"));
    let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
    (
        cells[1].parse().expect("a count"),
        cells[2].parse().expect("a count"),
    )
}

/// docs/checkov.md's table: `| CKV_K8S_N | resource | ... |` rows.
fn documented_findings() -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(root().join("docs/checkov.md")).expect("docs/checkov.md");
    text.lines()
        .filter(|l| l.starts_with("| CKV"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            (cells[0].to_string(), cells[1].trim_matches('`').to_string())
        })
        .collect()
}

/// checkov on the chart rendered with every optional object on fails
/// exactly the checks docs/checkov.md lists, each with its reason, and
/// passes and fails as many as its table says; with image digests set (as
/// the docs advise), the counts of the table's last row.
#[test]
fn checkov_fails_only_the_documented_checks() {
    let all_on = "serviceMonitor.enabled=true,config.prune=true,dashboards.enabled=true";
    let render = |extra: &str| {
        template(&[
            "--api-versions",
            "monitoring.coreos.com/v1",
            "--set",
            &format!("{all_on}{extra}"),
        ])
    };
    let Some(found) = checkov(&render("")) else {
        return;
    };
    let documented = documented_findings();
    assert_eq!(
        found.failed, documented,
        "checkov's findings on the chart are not docs/checkov.md's table"
    );
    assert_eq!(
        (found.passed, found.failed.len() as u64),
        documented_counts("the chart, every option on"),
        "docs/checkov.md's counts"
    );
    let digest = format!("sha256:{}", "0".repeat(64));
    let pinned = render(&format!(
        ",controller.image.digest={digest},gitSync.image.digest={digest}"
    ));
    let pinned = checkov(&pinned).expect("ran above");
    assert!(
        pinned.failed.iter().all(|(check, _)| check != "CKV_K8S_43"),
        "images pinned by digest still fail CKV_K8S_43: {:?}",
        pinned.failed
    );
    assert_eq!(
        (pinned.passed, pinned.failed.len() as u64),
        documented_counts("the same with `controller.image.digest`"),
        "docs/checkov.md's counts with digests"
    );
    println!(
        "checkov: {} passed, {} failed; with digests {} passed, {} failed",
        found.passed,
        found.failed.len(),
        pinned.passed,
        pinned.failed.len()
    );
}

// ---------------------------------------------------------------------------
// On the testbed's API server

/// Karpenter's values (and the getting-started guide's flags) install
/// dovetail with `helm install` on the real API server, the ignored keys
/// reported; the controller, as the chart's ServiceAccount and with the
/// chart's settings as its environment, provisions for a Deployment and
/// serves metrics promtool accepts; `helm upgrade` with changed values
/// changes the objects (pruning's RBAC granted, the pods' settings
/// checksum changed) and the restarted controller prunes; `helm
/// uninstall` removes the release and leaves the CRDs and the cluster's
/// NodePools.
#[test]
fn helm_install_upgrade_and_uninstall_on_the_real_api_server() {
    use crate::real_cluster::World;
    let Some(module) = karpenter_module() else {
        return;
    };
    let home = tempfile::tempdir().expect("a helm home");
    let values_dir = tempfile::tempdir().expect("tempdir");
    let mut notes = String::new();
    let helm_on = |tb: &crate::testbed::Testbed, args: &[String]| -> String {
        let mut all: Vec<String> = args.to_vec();
        all.extend([
            "--kubeconfig".to_string(),
            tb.kubeconfig.display().to_string(),
        ]);
        let argv: Vec<&str> = all.iter().map(String::as_str).collect();
        let out = helm_command(home.path(), &argv)
            .output()
            .expect("helm runs");
        assert!(
            out.status.success(),
            "helm {}: {}",
            all.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let mut w = World::with_install("helm", "dovetail", |tb, cluster| {
        let (values, sets) = karpenter_user_values(&module, values_dir.path(), cluster);
        let mut args: Vec<String> = [
            "install",
            "dovetail",
            "charts/dovetail",
            "--namespace",
            "dovetail",
            "--create-namespace",
            "-f",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(values.display().to_string());
        for s in &sets {
            args.extend(["--set".to_string(), s.clone()]);
        }
        let started = std::time::Instant::now();
        notes = helm_on(tb, &args);
        println!("helm install: {:.1} s", started.elapsed().as_secs_f64());
    });
    let reported = reported_ignored(&notes);
    let listed: BTreeSet<String> = serde_saphyr::from_str::<Value>(
        &std::fs::read_to_string(root().join("charts/dovetail/karpenter-values.yaml"))
            .expect("karpenter-values.yaml"),
    )
    .expect("YAML")["ignored"]
        .as_object()
        .expect("ignored")
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        reported.keys().cloned().collect::<BTreeSet<_>>(),
        listed,
        "helm install's NOTES do not report every ignored key Karpenter's values set:\n{notes}"
    );
    assert!(notes.contains("STATUS: deployed"), "{notes}");

    // The installed objects, on the real API server.
    let settings =
        w.tb.json(&["get", "configmap", "dovetail-settings", "-n", "dovetail"]);
    assert_eq!(
        settings["data"]["DOVETAIL_CLUSTER_NAME"],
        w.cluster.as_str()
    );
    let sa =
        w.tb.json(&["get", "serviceaccount", "dovetail", "-n", "dovetail"]);
    assert_eq!(sa["automountServiceAccountToken"], false);
    for object in [
        "deployment/dovetail",
        "service/dovetail-metrics",
        "networkpolicy/dovetail",
        "poddisruptionbudget/karpenter",
        "role/dovetail",
        "rolebinding/dovetail",
    ] {
        w.tb.kubectl_ok(&["get", object, "-n", "dovetail"]);
    }
    w.tb.kubectl_ok(&["get", "clusterrole/dovetail", "clusterrolebinding/dovetail"]);
    assert!(
        !w.tb
            .kubectl(&["get", "clusterrole/dovetail-prune"])
            .status
            .success(),
        "pruning is off by default"
    );

    // The guide's interruption queue is named after the cluster.
    let queue = w.cluster.clone();
    let endpoint = w.moto.endpoint();
    w.rt.block_on(async {
        crate::moto::sqs_client(&endpoint, "us-east-1")
            .await
            .create_queue()
            .queue_name(&queue)
            .send()
            .await
            .expect("CreateQueue");
    });
    let pod_env = |w: &World| -> Vec<(String, String)> {
        w.tb.json(&["get", "configmap", "dovetail-settings", "-n", "dovetail"])["data"]
            .as_object()
            .expect("data")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().expect("a string").to_string()))
            .collect()
    };
    w.controller_env = pod_env(&w);
    w.start_controller("a", &[]);
    w.deployment("web", 3, "500m", "");
    w.wait_ready("web", 3, Duration::from_secs(180));
    w.wait_consistent(Duration::from_secs(60));
    let metrics = w.controller("a").metrics().expect("/metrics answers");
    assert!(metrics.contains("karpenter_nodeclaims_created_total"));
    promtool_check_metrics(&metrics, "the running controller's /metrics");

    // helm upgrade with changed values: pruning on, more replicas, debug logs.
    let checksum = |w: &World| {
        w.tb.json(&["get", "deployment", "dovetail", "-n", "dovetail"])["spec"]["template"]
            ["metadata"]["annotations"]["checksum/settings"]
            .as_str()
            .expect("a checksum")
            .to_string()
    };
    let before = checksum(&w);
    let args: Vec<String> = [
        "upgrade",
        "dovetail",
        "charts/dovetail",
        "-n",
        "dovetail",
        "--reuse-values",
        "--set",
        "config.prune=true,replicas=3,logLevel=debug",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let started = std::time::Instant::now();
    let upgrade = helm_on(&w.tb, &args);
    println!("helm upgrade: {:.1} s", started.elapsed().as_secs_f64());
    assert!(upgrade.contains("REVISION: 2"), "{upgrade}");
    let deployment =
        w.tb.json(&["get", "deployment", "dovetail", "-n", "dovetail"]);
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_ne!(
        checksum(&w),
        before,
        "the pods' settings checksum did not change"
    );
    let env = pod_env(&w);
    assert!(env.contains(&("DOVETAIL_PRUNE".to_string(), "true".to_string())));
    assert!(env.contains(&("DOVETAIL_LOG_LEVEL".to_string(), "debug".to_string())));
    w.tb.kubectl_ok(&[
        "get",
        "clusterrole/dovetail-prune",
        "clusterrolebinding/dovetail-prune",
    ]);
    // The new settings, as a rollout would start them: a NodePool removed
    // from the repository is pruned.
    w.controllers.clear();
    w.controller_env = env;
    w.commit(
        &[(
            "batch.yaml",
            Some(&crate::real_cluster::nodepool("batch", "")),
        )],
        "a batch pool",
    );
    w.start_controller("b", &[]);
    let exists = |w: &World| w.tb.kubectl(&["get", "nodepool", "batch"]).status.success();
    w.tb.wait_for("the batch NodePool", Duration::from_secs(60), || exists(&w));
    w.commit(&[("batch.yaml", None)], "no batch pool");
    w.tb.wait_for("the batch NodePool pruned", Duration::from_secs(60), || {
        !exists(&w)
    });
    w.assert_nothing_forbidden();
    w.wait_ready("web", 3, Duration::from_secs(60));

    // helm uninstall: the release is gone, the CRDs and NodePools stay.
    w.controllers.clear();
    let out = helm_on(
        &w.tb,
        &["uninstall", "dovetail", "-n", "dovetail", "--wait"]
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    );
    assert!(out.contains("uninstalled"), "{out}");
    for object in [
        "deployment/dovetail",
        "serviceaccount/dovetail",
        "configmap/dovetail-settings",
        "service/dovetail-metrics",
        "networkpolicy/dovetail",
        "poddisruptionbudget/karpenter",
        "role/dovetail",
    ] {
        assert!(
            !w.tb
                .kubectl(&["get", object, "-n", "dovetail"])
                .status
                .success(),
            "{object} remains"
        );
    }
    for object in ["clusterrole/dovetail", "clusterrole/dovetail-prune"] {
        assert!(
            !w.tb.kubectl(&["get", object]).status.success(),
            "{object} remains"
        );
    }
    w.tb.kubectl_ok(&[
        "get",
        "crd",
        "nodepools.karpenter.sh",
        "ec2nodeclasses.karpenter.k8s.aws",
    ]);
    w.tb.kubectl_ok(&["get", "nodepool", "default"]);
}

/// The README's install steps name every placeholder of
/// `deploy/iam-policy.json`, and ask for nothing the controller discovers
/// (the endpoint, CA bundle and service CIDR come from
/// `eks:DescribeCluster`).
#[test]
fn the_readme_s_install_names_every_placeholder_and_asks_nothing_discovered() {
    let policy = std::fs::read_to_string(root().join("deploy/iam-policy.json")).expect("policy");
    let placeholders: BTreeSet<String> = policy
        .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .filter(|w| w.len() >= 4 && w.chars().any(|c| c == '_') || *w == "REGION")
        .map(str::to_string)
        .collect();
    assert!(placeholders.len() >= 5, "{placeholders:?}");
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let install = readme
        .split("### Before installing")
        .nth(1)
        .and_then(|s| s.split("### Helm values").next())
        .expect("README.md's install sections");
    for p in &placeholders {
        assert!(
            install.contains(&format!("`{p}`")),
            "README.md's install steps do not name {p} of deploy/iam-policy.json"
        );
    }
    for discovered in [
        "CLUSTER_ENDPOINT",
        "CLUSTER_CA_BUNDLE",
        "SERVICE_CIDR",
        "clusterEndpoint",
        "clusterCABundle",
        "describe-cluster",
    ] {
        assert!(
            !install.contains(discovered),
            "README.md's install steps ask for {discovered}, which the controller discovers"
        );
    }
    // Helm first, kustomize second.
    let (helm, kustomize) = (
        install.find("### Install with Helm").expect("Helm"),
        install
            .find("### Install with kustomize")
            .expect("kustomize"),
    );
    assert!(helm < kustomize, "Helm's install comes first");
}
