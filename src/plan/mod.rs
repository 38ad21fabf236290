//! `dovetail plan`: reads the config repository's NodePools and
//! EC2NodeClasses, a catalog, pending pods and optionally a cluster snapshot,
//! runs the scheduling core once and reports the NodeClaims it would launch.
//! The conversion of its inputs to the core's domain is [`crate::convert`].
//!
//! The repository is loaded and validated as `dovetail validate` does it, so
//! `plan` refuses an invalid configuration.

mod report;

use std::path::{Path, PathBuf};
use std::time::Instant;

pub use report::{PlanNodeClaim, PlanPlacement, PlanPoolReason, PlanReport, PlanUnschedulable};

use crate::api::SlimPod;
use crate::convert::{ConfigDocs, Invalid, build_input};
use crate::diag::Pos;
use crate::model::catalog::{CatalogError, read_catalog};
use crate::scheduling::{Preferences, SolveError, SolveOptions, solve};
use crate::snapshot::{ReadError, items, read_snapshot_located, read_text};

/// What `plan` reads.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// The config repository (a directory of YAML files).
    pub config: PathBuf,
    pub catalog: PathBuf,
    pub pods: PathBuf,
    pub snapshot: Option<PathBuf>,
    pub preferences: Preferences,
    /// The injected clock, ms since the epoch.
    pub now_ms: i64,
}

/// Why `plan` could not produce a report (all exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Source(#[from] crate::config::source::SourceError),
    #[error("the configuration is invalid: {}", .0.first().map(ToString::to_string).unwrap_or_default())]
    InvalidConfig(Vec<crate::diag::Diagnostic>),
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("no NodePool found in {0}")]
    NoNodePools(String),
    #[error(transparent)]
    Solve(#[from] SolveError),
}

/// Reads pod manifests: multi-document YAML, a v1/List, or JSON lines.
/// JSON pods are deserialised straight from the text.
pub fn read_pods(path: &Path) -> Result<Vec<(Pos, SlimPod)>, ReadError> {
    let (file, text) = read_text(path)?;
    let items = items(&file, &text)?;
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        if it.kind.as_deref().is_some_and(|k| k != "Pod") {
            return Err(ReadError::Invalid(Box::new(
                crate::diag::Diagnostic::error("object", "expected a Pod")
                    .in_file(&file)
                    .at(it.pos)
                    .with_object(it.name.clone()),
            )));
        }
        let mut pod: SlimPod = it.decode(&file)?;
        crate::snapshot::check_pod(&file, &it, &pod)?;
        pod.slim();
        out.push((it.pos, pod));
    }
    Ok(out)
}

/// Reads and validates the configuration files on disk under `dir`, as
/// `dovetail validate --worktree` does; an invalid repository is an error.
pub fn read_config(dir: &Path) -> Result<ConfigDocs, PlanError> {
    use crate::config::{load, source::Revision, validate, yaml::Limits};
    let loaded = load::load(dir, &Revision::Worktree, false, &Limits::default())?;
    let report = validate::validate(&loaded, &validate::Options::default());
    let errors: Vec<crate::diag::Diagnostic> = report
        .diagnostics
        .iter()
        .filter(|d| d.severity == crate::diag::Severity::Error)
        .cloned()
        .collect();
    if !errors.is_empty() {
        return Err(PlanError::InvalidConfig(errors));
    }
    Ok(ConfigDocs::from_report(&report))
}

/// The report of a solve: for each pod it could not place, the precise
/// reason per NodePool where the input shows one
/// ([`crate::scheduling::explain`]), and the workload it belongs to.
/// `pods` are the Kubernetes pods the input was built from.
pub fn report(
    result: &crate::scheduling::SolveResult,
    solve_seconds: f64,
    input: &crate::scheduling::SolveInput,
    pods: &[&SlimPod],
) -> PlanReport {
    let mut report = PlanReport::new(result, solve_seconds);
    if report.unschedulable.is_empty() {
        return report;
    }
    let raw: std::collections::HashMap<String, &SlimPod> =
        pods.iter().map(|p| (p.key(), *p)).collect();
    let specs: std::collections::HashMap<String, &crate::scheduling::PodSpec> =
        input.pods.iter().map(|p| (p.key(), &**p)).collect();
    for u in &mut report.unschedulable {
        let pod = raw.get(&u.pod).copied();
        let (text, parts) =
            crate::scheduling::explain::reasons(input, specs.get(&u.pod).copied(), pod, &u.reason);
        u.reason = text;
        u.nodepools = parts
            .into_iter()
            .map(|(nodepool, reason)| PlanPoolReason { nodepool, reason })
            .collect();
        u.owner = pod.and_then(owner);
    }
    report
}

/// The workload a pod belongs to, as `Deployment default/web`.
fn owner(pod: &SlimPod) -> Option<String> {
    crate::convert::workload_of(pod).map(|(kind, ns, name)| format!("{kind} {ns}/{name}"))
}

/// Runs `plan`: loads the inputs, solves once, reports.
pub fn run(opts: &PlanOptions) -> Result<PlanReport, PlanError> {
    let mut config = read_config(&opts.config)?;
    config.take_static();
    // Karpenter's NodeOverlay gate is off by default; `dovetail plan
    // --feature-gates NodeOverlay=true` applies them.
    config.overlays.clear();
    if config.nodepools.is_empty() {
        return Err(PlanError::NoNodePools(opts.config.display().to_string()));
    }
    let catalog = read_catalog(&opts.catalog)?;
    let pods = read_pods(&opts.pods)?;
    let snapshot = opts
        .snapshot
        .as_deref()
        .map(read_snapshot_located)
        .transpose()?;
    let input = build_input(
        &config,
        &catalog,
        &pods,
        &opts.pods.display().to_string(),
        snapshot.as_ref().map(|(s, o)| (s, o)),
        opts.now_ms,
    )?;
    let solve_opts = SolveOptions {
        preferences: opts.preferences,
        now_ms: opts.now_ms,
    };
    let start = Instant::now();
    let result = solve(&input, &solve_opts)?;
    let seconds = start.elapsed().as_secs_f64();
    let mut raw: Vec<&SlimPod> = pods.iter().map(|(_, p)| p).collect();
    if let Some((s, _)) = &snapshot {
        raw.extend(s.pods.iter().map(AsRef::as_ref));
    }
    Ok(report(&result, seconds, &input, &raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODEPOOL: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: general
spec:
  template:
    metadata:
      labels:
        team: web
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: [on-demand]
  limits:
    cpu: \"100\"
";
    const NODECLASS: &str = "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiSelectorTerms:
    - alias: al2023@latest
  role: node-role
  subnetSelectorTerms:
    - tags: {env: test}
  securityGroupSelectorTerms:
    - tags: {env: test}
  kubelet:
    maxPods: 20
";
    const CATALOG: &str = r#"{"instanceTypes": [
      {"name": "m5.large", "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
       "overhead": {"kubeReserved": {"cpu": "70m", "memory": "442Mi"}},
       "offerings": [{"zone": "a", "capacityType": "on-demand", "price": 0.096},
                     {"zone": "a", "capacityType": "spot", "price": 0.03}]},
      {"name": "m5.xlarge", "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
       "overhead": {"kubeReserved": {"cpu": "80m", "memory": "600Mi"}},
       "offerings": [{"zone": "a", "capacityType": "on-demand", "price": 0.192}]}]}"#;

    fn pod(name: &str, cpu: &str) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default"}},"spec":{{"containers":[{{"name":"c","resources":{{"requests":{{"cpu":"{cpu}","memory":"1Gi"}}}}}}]}}}}"#
        )
    }

    fn setup(pods: &str) -> (tempfile::TempDir, PlanOptions) {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        std::fs::write(repo.join("nodepool.yaml"), NODEPOOL).unwrap();
        std::fs::write(repo.join("nodeclass.yaml"), NODECLASS).unwrap();
        std::fs::write(dir.path().join("catalog.json"), CATALOG).unwrap();
        std::fs::write(dir.path().join("pods.jsonl"), pods).unwrap();
        let opts = PlanOptions {
            config: repo,
            catalog: dir.path().join("catalog.json"),
            pods: dir.path().join("pods.jsonl"),
            snapshot: None,
            preferences: Preferences::Respect,
            now_ms: 0,
        };
        (dir, opts)
    }

    #[test]
    fn plans_from_files_and_reports_the_convention_keys() {
        let pods = [pod("a", "1500m"), pod("b", "1"), pod("huge", "64")].join("\n");
        let (_dir, opts) = setup(&pods);
        let report = run(&opts).unwrap();
        assert_eq!(report.nodeclaim_count, 1);
        let c = &report.nodeclaims[0];
        assert_eq!(c.nodepool, "general");
        assert_eq!(c.instance_types, vec!["m5.xlarge"]);
        assert_eq!(
            c.capacity_types,
            vec!["on-demand"],
            "the NodePool allows on-demand only"
        );
        assert_eq!(c.requests["cpu"], "2500m");
        assert_eq!(report.unschedulable.len(), 1);
        assert_eq!(report.unschedulable[0].pod, "default/huge");
        assert!(
            report.unschedulable[0].reason.contains("cpu=64"),
            "{}",
            report.unschedulable[0].reason
        );
        assert!(!report.all_placed());
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for k in [
            "schema_version",
            "solve_seconds",
            "nodeclaim_count",
            "nodeclaims",
            "existing_placements",
            "price_per_hour",
            "lower_bound_price_per_hour",
            "unschedulable",
        ] {
            assert!(keys.contains(&k), "missing {k}");
        }
        for k in [
            "nodepool",
            "instance_types",
            "zones",
            "capacity_types",
            "pods",
            "requests",
            "price_per_hour",
        ] {
            assert!(
                json["nodeclaims"][0].get(k).is_some(),
                "missing nodeclaims[].{k}"
            );
        }
        assert!(report.to_string().starts_with("1 new NodeClaim (2 pods), "));
    }

    #[test]
    fn bad_pod_files_name_file_and_line() {
        let pods = format!("{}\n{{\"kind\": \"Pod\", \n", pod("a", "1"));
        let (_dir, opts) = setup(&pods);
        let err = run(&opts).unwrap_err().to_string();
        assert!(err.contains("pods.jsonl:2:"), "{err}");
    }
}
