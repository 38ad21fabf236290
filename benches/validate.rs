//! Benchmark: `validate` over a generated repository of 10,000 NodePool and
//! EC2NodeClass documents in 1,000 files, with load (read + parse), schema,
//! and rule-checking time reported separately; and, for comparison, the
//! reference CRDs' CEL rules evaluated by kube-cel alone, single-threaded.
//!
//! Run: `cargo bench --bench validate` (release). Results go in BENCHMARKS.md.

use std::path::Path;
use std::time::{Duration, Instant};

use dovetail::config::load;
use dovetail::config::source::Revision;
use dovetail::config::validate::{self, Options};
use dovetail::config::yaml::Limits;

const FILES: usize = 1_000;
const DOCS_PER_FILE: usize = 10;
const RUNS: usize = 7;

fn nodepool(i: usize) -> String {
    format!(
        r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: pool-{i}
spec:
  template:
    metadata:
      labels:
        team: team-{t}
        workload-class: general
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: class-{c}
      taints:
        - key: dedicated
          value: team-{t}
          effect: NoSchedule
      requirements:
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["c", "m", "r"]
        - key: karpenter.k8s.aws/instance-generation
          operator: Gt
          values: ["5"]
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64", "arm64"]
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["spot", "on-demand"]
        - key: karpenter.k8s.aws/instance-family
          operator: Exists
          minValues: 3
      expireAfter: 720h
  limits:
    cpu: "1000"
    memory: 4000Gi
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
    budgets:
      - nodes: "10%"
      - nodes: "0"
        schedule: "0 9 * * mon-fri"
        duration: 8h
  weight: {w}
"#,
        t = i % 50,
        c = i / 2,
        w = 1 + i % 100
    )
}

fn nodeclass(i: usize) -> String {
    format!(
        r#"apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: class-{i}
spec:
  amiSelectorTerms:
    - alias: al2023@latest
  role: KarpenterNodeRole-{i}
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: cluster-{i}
  securityGroupSelectorTerms:
    - tags:
        karpenter.sh/discovery: cluster-{i}
  blockDeviceMappings:
    - deviceName: /dev/xvda
      rootVolume: true
      ebs:
        volumeSize: 100Gi
        volumeType: gp3
        encrypted: true
  kubelet:
    maxPods: 110
    evictionHard:
      memory.available: 5%
  tags:
    team: team-{t}
"#,
        t = i % 50
    )
}

/// Half NodePools, half EC2NodeClasses; every NodePool's class exists.
fn generate(dir: &Path) -> (usize, usize) {
    let (mut pools, mut classes) = (0, 0);
    for f in 0..FILES {
        let mut text = String::new();
        for d in 0..DOCS_PER_FILE {
            let i = f * DOCS_PER_FILE + d;
            if !text.is_empty() {
                text.push_str("---\n");
            }
            if i.is_multiple_of(2) {
                text.push_str(&nodepool(pools));
                pools += 1;
            } else {
                text.push_str(&nodeclass(classes));
                classes += 1;
            }
        }
        std::fs::write(dir.join(format!("config-{f:04}.yaml")), text).unwrap();
    }
    (pools, classes)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let (pools, classes) = generate(dir.path());
    let bytes: u64 = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    println!(
        "repository: {FILES} files, {} documents ({pools} NodePools, {classes} EC2NodeClasses), {:.1} MB",
        pools + classes,
        bytes as f64 / 1e6
    );

    let (mut total, mut loads, mut converts, mut schemas, mut rules, mut crosses) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..RUNS {
        let t = Instant::now();
        let loaded =
            load::load(dir.path(), &Revision::Worktree, false, &Limits::default()).unwrap();
        let load_time = t.elapsed();
        let report = validate::validate(&loaded, &Options::default());
        total.push(t.elapsed());
        assert!(
            report.passes(false),
            "{:?}",
            &report.diagnostics[..3.min(report.diagnostics.len())]
        );
        assert_eq!(report.objects.len(), pools + classes);
        loads.push(load_time);
        converts.push(report.timings.convert);
        schemas.push(report.timings.schema);
        rules.push(report.timings.rules);
        crosses.push(report.timings.cross);
    }
    println!("validate, median of {RUNS} runs:");
    println!("  total              {}", ms(median(total)));
    println!("  read + parse       {}", ms(median(loads)));
    println!("  convert to JSON    {}", ms(median(converts)));
    println!("  schema             {}", ms(median(schemas)));
    println!("  rules (CEL+runtime){}", ms(median(rules)));
    println!("  cross-object       {}", ms(median(crosses)));

    kube_cel_only(dir.path());
}

/// The reference CRDs' CEL rules evaluated by kube-cel over the same
/// documents, single-threaded, schema compiled once per kind.
fn kube_cel_only(dir: &Path) {
    use kube::core::cel::{Validator, compile_schema};
    let reference =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/karpenter-v1.14.1-crds");
    let schema_of = |file: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(reference.join(file)).unwrap();
        let crd: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    };
    let np = compile_schema(&schema_of("karpenter.sh_nodepools.yaml"));
    let nc = compile_schema(&schema_of("karpenter.k8s.aws_ec2nodeclasses.yaml"));
    let loaded = load::load(dir, &Revision::Worktree, false, &Limits::default()).unwrap();
    let docs: Vec<serde_json::Value> = loaded
        .files
        .iter()
        .flat_map(|f| f.docs.iter().map(|d| d.root.to_json()))
        .collect();
    let validator = Validator::new();
    let mut times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut failures = 0;
        for d in &docs {
            let schema = if d["kind"] == "NodePool" { &np } else { &nc };
            if validator.validate_compiled(schema, d, None).is_err() {
                failures += 1;
            }
        }
        assert_eq!(failures, 0, "kube-cel rejected generated documents");
        times.push(t.elapsed());
    }
    println!(
        "kube-cel alone (reference CEL rules only, 1 thread), median of 3: {}",
        ms(median(times))
    );
}
