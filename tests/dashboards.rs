//! Karpenter's own Grafana dashboards work unchanged: every metric and
//! label their queries use (charts/dovetail/dashboards, Karpenter v1.14.1)
//! is in `dovetail simulate --metrics` output after the bundled demo, with
//! samples their selectors match; and `--metrics-every` writes the run's
//! snapshots as one OpenMetrics file.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde_json::Value;

use crate::support::{demo_outputs, root};

/// Labels Prometheus adds to every series of a scrape target (`job` from
/// the scrape configuration, `cluster` from external labels in a
/// multi-cluster setup); no exporter writes them.
const TARGET_LABELS: [&str; 2] = ["job", "cluster"];

/// Metrics of other exporters the dashboards read: node-exporter's, for
/// the capacity dashboard's node uptime panel.
const OTHER_EXPORTERS: [&str; 2] = ["node_time_seconds", "node_boot_time_seconds"];

/// Labels a panel groups by that Karpenter v1.14.1 itself does not put on
/// the family (the panel then shows one group, against Karpenter as
/// against dovetail): `karpenter_voluntary_disruption_decisions_total` has
/// no `nodepool` (Karpenter has it on `..._decisions_by_nodepool_total`).
const ABSENT_IN_KARPENTER: [(&str, &str); 1] =
    [("karpenter_voluntary_disruption_decisions_total", "nodepool")];

// --- PromQL, as far as the dashboards use it --------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Var(String),
    Str(String),
    Num,
    Punct(String),
}

fn tokens(expr: &str) -> Vec<Tok> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '"' || c == '\'' {
            let mut s = String::new();
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' {
                    i += 1;
                }
                s.push(chars[i]);
                i += 1;
            }
            i += 1;
            out.push(Tok::Str(s));
        } else if c == '$' {
            let start = i + 1;
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Tok::Var(chars[start..i].iter().collect()));
        } else if c.is_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            out.push(Tok::Num);
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            if ["!=", "=~", "!~", "=="].contains(&two.as_str()) {
                out.push(Tok::Punct(two));
                i += 2;
            } else {
                out.push(Tok::Punct(c.to_string()));
                i += 1;
            }
        }
    }
    out
}

#[derive(Debug, Clone)]
struct Matcher {
    label: String,
    op: String,
    /// The value, or the Grafana variable it names (`$nodepool`).
    value: String,
}

#[derive(Debug, Clone)]
struct Selector {
    metric: String,
    matchers: Vec<Matcher>,
}

/// The selectors of an expression, and the labels its aggregations group
/// by (`by (a, $var)`).
#[derive(Debug, Default)]
struct Query {
    selectors: Vec<Selector>,
    grouping: Vec<String>,
}

const OPERATORS: [&str; 10] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "or",
    "and",
    "unless",
    "bool",
];

fn parse(expr: &str) -> Query {
    let t = tokens(expr);
    let mut q = Query::default();
    let mut i = 0;
    let punct = |i: usize, p: &str| matches!(t.get(i), Some(Tok::Punct(x)) if x == p);
    while i < t.len() {
        match &t[i] {
            Tok::Punct(p) if p == "[" => {
                // A range: `[5m]`, `[$__rate_interval]`.
                while i < t.len() && !punct(i, "]") {
                    i += 1;
                }
                i += 1;
            }
            Tok::Ident(id) if OPERATORS.contains(&id.as_str()) => {
                if (id == "by" || id == "without") && punct(i + 1, "(") {
                    i += 2;
                    while i < t.len() && !punct(i, ")") {
                        match &t[i] {
                            Tok::Ident(l) => q.grouping.push(l.clone()),
                            Tok::Var(v) => q.grouping.push(format!("${v}")),
                            _ => {}
                        }
                        i += 1;
                    }
                }
                i += 1;
            }
            // A function, or an aggregation with its grouping first
            // (`sum by (a) (...)`).
            Tok::Ident(_)
                if punct(i + 1, "(")
                    || matches!(t.get(i + 1), Some(Tok::Ident(n)) if n == "by" || n == "without") =>
            {
                i += 1
            }
            Tok::Ident(name) => {
                let mut sel = Selector {
                    metric: name.clone(),
                    matchers: Vec::new(),
                };
                i += 1;
                if punct(i, "{") {
                    i += 1;
                    while i < t.len() && !punct(i, "}") {
                        if let (Some(Tok::Ident(label)), Some(Tok::Punct(op))) =
                            (t.get(i), t.get(i + 1))
                        {
                            let value = match t.get(i + 2) {
                                Some(Tok::Str(s)) => s.clone(),
                                other => panic!("{expr}: matcher value {other:?}"),
                            };
                            sel.matchers.push(Matcher {
                                label: label.clone(),
                                op: op.clone(),
                                value,
                            });
                            i += 3;
                        } else {
                            i += 1;
                        }
                    }
                    i += 1;
                }
                q.selectors.push(sel);
            }
            _ => i += 1,
        }
    }
    q
}

/// Every query string of a dashboard: panel targets' `expr`, and template
/// variables (`label_values(selector, label)` or a custom list).
struct Dashboard {
    exprs: Vec<String>,
    /// Name → `label_values(...)` query, or the custom options.
    variables: BTreeMap<String, Variable>,
}

#[derive(Debug, Clone)]
enum Variable {
    LabelValues { selector: String, label: String },
    Custom(Vec<String>),
}

fn dashboard(file: &str) -> Dashboard {
    let path = root().join("charts/dovetail/dashboards").join(file);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut exprs = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(e)) = m.get("expr") {
                    out.push(e.clone());
                }
                for (k, x) in m {
                    if k != "templating" {
                        walk(x, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(&v, &mut exprs);
    let mut variables = BTreeMap::new();
    let re = Regex::new(r"^label_values\((.*),\s*([a-zA-Z_]+)\)$").unwrap();
    for var in v["templating"]["list"].as_array().unwrap() {
        let name = var["name"].as_str().unwrap().to_string();
        match var["type"].as_str() {
            Some("query") => {
                let q = var["query"]["query"]
                    .as_str()
                    .or(var["query"].as_str())
                    .unwrap();
                let c = re.captures(q).unwrap_or_else(|| panic!("{file}: {q}"));
                variables.insert(
                    name,
                    Variable::LabelValues {
                        selector: c[1].to_string(),
                        label: c[2].to_string(),
                    },
                );
            }
            Some("custom") => {
                let opts = var["query"].as_str().unwrap();
                variables.insert(
                    name,
                    Variable::Custom(opts.split(',').map(|s| s.trim().to_string()).collect()),
                );
            }
            _ => {}
        }
    }
    Dashboard { exprs, variables }
}

// --- The Prometheus text format ---------------------------------------------

#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn parse_exposition(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => panic!("{line}"),
        };
        let mut labels = BTreeMap::new();
        let mut rest = rest;
        if let Some(body) = rest.strip_prefix('{') {
            let chars: Vec<char> = body.chars().collect();
            let mut i = 0;
            loop {
                if chars[i] == '}' {
                    i += 1;
                    break;
                }
                if chars[i] == ',' {
                    i += 1;
                    continue;
                }
                let eq = i + chars[i..].iter().position(|c| *c == '=').unwrap();
                let key: String = chars[i..eq].iter().collect();
                assert_eq!(chars[eq + 1], '"', "{line}");
                let mut j = eq + 2;
                let mut value = String::new();
                while chars[j] != '"' {
                    if chars[j] == '\\' {
                        j += 1;
                        value.push(match chars[j] {
                            'n' => '\n',
                            c => c,
                        });
                    } else {
                        value.push(chars[j]);
                    }
                    j += 1;
                }
                labels.insert(key, value);
                i = j + 1;
            }
            let consumed: usize = chars[..i].iter().map(|c| c.len_utf8()).sum();
            rest = &body[consumed..];
        }
        let value = rest.split_whitespace().next().unwrap();
        let value = match value {
            "NaN" => f64::NAN,
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|e| panic!("{line}: {e}")),
        };
        out.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    out
}

/// The values of a variable in this output (a `label_values` query's
/// label over the samples its selector matches), or its custom options.
fn variable_values(var: &Variable, samples: &[Sample]) -> Vec<String> {
    match var {
        Variable::Custom(opts) => opts.clone(),
        Variable::LabelValues { selector, label } => {
            let q = parse(selector);
            let sel = &q.selectors[0];
            let values: BTreeSet<String> = samples
                .iter()
                .filter(|s| matches(sel, s, &BTreeMap::new()))
                .filter_map(|s| s.labels.get(label).cloned())
                .filter(|v| !v.is_empty())
                .collect();
            values.into_iter().collect()
        }
    }
}

/// Whether a sample satisfies a selector, with each Grafana variable in a
/// matcher's value standing for its values (as Grafana's "All" expands a
/// multi-value variable: `(a|b|c)`); target labels are Prometheus's, not
/// the exporter's, and are left out.
fn matches(sel: &Selector, s: &Sample, vars: &BTreeMap<String, Vec<String>>) -> bool {
    if s.name != sel.metric {
        return false;
    }
    sel.matchers.iter().all(|m| {
        if TARGET_LABELS.contains(&m.label.as_str()) {
            return true;
        }
        let actual = s.labels.get(&m.label).map_or("", String::as_str);
        let wanted: Vec<String> = match m.value.strip_prefix('$') {
            Some(var) => vars
                .get(var)
                .unwrap_or_else(|| panic!("variable ${var} has no values"))
                .clone(),
            None => vec![m.value.clone()],
        };
        match m.op.as_str() {
            "=" => wanted.iter().any(|w| w == actual),
            "!=" => wanted.iter().all(|w| w != actual),
            "=~" | "!~" => {
                let alternatives = wanted
                    .iter()
                    .map(|w| {
                        if m.value.starts_with('$') {
                            regex::escape(w)
                        } else {
                            w.clone()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("|");
                let re = Regex::new(&format!("^(?:{alternatives})$")).unwrap();
                re.is_match(actual) == (m.op == "=~")
            }
            op => panic!("operator {op}"),
        }
    })
}

/// The family of a sample name: a histogram's or summary's without its
/// `_bucket`, `_count` or `_sum`.
fn family_of(metric: &str) -> String {
    ["_bucket", "_count", "_sum"]
        .iter()
        .find_map(|s| metric.strip_suffix(s))
        .unwrap_or(metric)
        .to_string()
}

#[test]
fn every_metric_and_label_of_karpenter_s_dashboards_is_in_the_demo_s_metrics() {
    let demo = demo_outputs();
    let samples = parse_exposition(&demo.metrics);
    let names: BTreeSet<&str> = samples.iter().map(|s| s.name.as_str()).collect();
    let labels_out: BTreeSet<&str> = samples
        .iter()
        .flat_map(|s| s.labels.keys().map(String::as_str))
        .collect();

    let mut families = BTreeSet::new();
    let mut dashboard_labels = BTreeSet::new();
    let mut other_exporters = BTreeSet::new();
    let mut checked = 0;
    for file in [
        "karpenter-capacity-dashboard.json",
        "karpenter-performance-dashboard.json",
    ] {
        let d = dashboard(file);
        assert!(!d.exprs.is_empty(), "{file}");
        // Variables, as Grafana would fill them from this output.
        let mut vars: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, var) in &d.variables {
            let values = variable_values(var, &samples);
            assert!(
                !values.is_empty(),
                "{file}: ${name} ({var:?}) has no values"
            );
            if let Variable::LabelValues { selector, label } = var {
                dashboard_labels.insert(label.clone());
                for s in parse(selector).selectors {
                    families.insert(family_of(&s.metric));
                }
            }
            vars.insert(name.clone(), values);
        }
        for expr in &d.exprs {
            let q = parse(expr);
            assert!(!q.selectors.is_empty(), "{file}: no selector in {expr}");
            for sel in &q.selectors {
                if OTHER_EXPORTERS.contains(&sel.metric.as_str()) {
                    other_exporters.insert(sel.metric.clone());
                    continue;
                }
                families.insert(family_of(&sel.metric));
                assert!(
                    names.contains(sel.metric.as_str()),
                    "{file}: {} is not in the metrics\n  query: {expr}",
                    sel.metric
                );
                for m in &sel.matchers {
                    dashboard_labels.insert(m.label.clone());
                }
                let hit = samples.iter().any(|s| matches(sel, s, &vars));
                assert!(hit, "{file}: no sample matches {sel:?}\n  query: {expr}");
                checked += 1;
            }
            // Grouping labels: each is on a family the expression reads
            // (node-exporter's own panels aside).
            let karpenter = q
                .selectors
                .iter()
                .any(|s| !OTHER_EXPORTERS.contains(&s.metric.as_str()));
            for label in q.grouping.iter().filter(|_| karpenter) {
                let expanded: Vec<String> = match label.strip_prefix('$') {
                    Some(v) => vars[v].clone(),
                    None => vec![label.clone()],
                };
                for label in expanded {
                    dashboard_labels.insert(label.clone());
                    if TARGET_LABELS.contains(&label.as_str()) {
                        continue;
                    }
                    let on_a_family = q.selectors.iter().any(|sel| {
                        samples
                            .iter()
                            .any(|s| s.name == sel.metric && s.labels.contains_key(&label))
                    });
                    let absent_in_karpenter = q.selectors.iter().any(|sel| {
                        ABSENT_IN_KARPENTER.contains(&(sel.metric.as_str(), label.as_str()))
                    });
                    assert!(
                        on_a_family || absent_in_karpenter,
                        "{file}: grouping label {label} is on no family of {expr}"
                    );
                }
            }
        }
    }
    // The parser found what the dashboards hold: the issue counts 15
    // families, and the exclusions are each used.
    assert_eq!(families.len(), 15, "{families:?}");
    assert_eq!(
        other_exporters,
        OTHER_EXPORTERS.iter().map(|s| s.to_string()).collect()
    );
    assert!(checked > 40, "{checked} selectors checked");
    for label in &dashboard_labels {
        if !TARGET_LABELS.contains(&label.as_str()) {
            assert!(
                labels_out.contains(label.as_str()),
                "label {label} is in no metric"
            );
        }
    }
    for label in [
        "nodepool",
        "zone",
        "arch",
        "capacity_type",
        "instance_type",
        "resource_type",
        "phase",
        "reason",
        "decision",
        "consolidation_type",
        "controller",
    ] {
        assert!(dashboard_labels.contains(label), "{label} not extracted");
    }
}

fn value(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| {
            s.name == name
                && want
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// The values mean what Karpenter's do: they agree with the JSON report of
/// the same run.
#[test]
fn the_demo_s_metrics_agree_with_its_report() {
    let demo = demo_outputs();
    let samples = parse_exposition(&demo.metrics);
    let r = &demo.report;
    let decisions = r["disruptions"].as_array().unwrap();
    let voluntary: Vec<&Value> = decisions
        .iter()
        .filter(|d| ["Empty", "Underutilized", "Drifted"].contains(&d["reason"].as_str().unwrap()))
        .collect();
    assert!(!voluntary.is_empty());
    assert_eq!(
        value(
            &samples,
            "karpenter_voluntary_disruption_decisions_total",
            &[]
        ),
        voluntary.len() as f64
    );
    for d in &voluntary {
        let reason = d["reason"].as_str().unwrap().to_lowercase();
        let want = [
            ("reason", reason.as_str()),
            ("decision", d["decision"].as_str().unwrap()),
            (
                "consolidation_type",
                d["consolidation_type"].as_str().unwrap(),
            ),
        ];
        assert!(
            value(
                &samples,
                "karpenter_voluntary_disruption_decisions_total",
                &want
            ) >= 1.0,
            "{want:?}"
        );
    }
    // The interrupted spot node, by the message's kind.
    let interrupted = decisions
        .iter()
        .filter(|d| d["reason"] == "Interrupted")
        .count();
    assert!(interrupted > 0);
    assert_eq!(
        value(
            &samples,
            "karpenter_nodeclaims_disrupted_total",
            &[("reason", "spot_interrupted"), ("capacity_type", "spot")]
        ),
        interrupted as f64
    );
    // Nodes: each registered once, terminated ones counted with their
    // termination time.
    let nodes = r["nodes"].as_array().unwrap();
    let registered = nodes.iter().filter(|n| n["name"] != "").count() as f64;
    assert_eq!(
        value(&samples, "karpenter_nodes_created_total", &[]),
        registered
    );
    let terminated = value(&samples, "karpenter_nodes_terminated_total", &[]);
    assert!(terminated > 0.0);
    assert_eq!(
        value(
            &samples,
            "karpenter_nodes_termination_duration_seconds_count",
            &[]
        ),
        terminated
    );
    let running = nodes.iter().filter(|n| n["deleted_at"].is_null()).count() as f64;
    let alloc_nodes: BTreeSet<&str> = samples
        .iter()
        .filter(|s| s.name == "karpenter_nodes_allocatable")
        .map(|s| s.labels["node_name"].as_str())
        .collect();
    assert_eq!(alloc_nodes.len() as f64, running);
    assert_eq!(
        value(
            &samples,
            "karpenter_nodepools_usage",
            &[("resource_type", "nodes")]
        ),
        running
    );
    // Every pod seen pending that started.
    assert!(
        value(
            &samples,
            "karpenter_pods_startup_duration_seconds_count",
            &[]
        ) > 0.0
    );
    assert_eq!(
        value(&samples, "karpenter_pods_state", &[]) as usize,
        r["pods"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["deleted_at"].is_null())
            .count()
    );
    // Each loop reconciled, as controller-runtime counts.
    for c in [
        "provisioner",
        "nodeclaim.lifecycle",
        "node.termination",
        "disruption",
        "interruption",
    ] {
        assert!(
            value(
                &samples,
                "controller_runtime_reconcile_total",
                &[("controller", c)]
            ) > 0.0,
            "{c}"
        );
    }
}

#[test]
fn metrics_every_writes_the_run_as_one_openmetrics_file() {
    let demo = demo_outputs();
    let text = &demo.snapshots;
    assert!(
        text.ends_with("# EOF\n"),
        "{}",
        &text[text.len().saturating_sub(200)..]
    );
    // Each family once, as OpenMetrics requires; counters without _total.
    let types: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .collect();
    let unique: BTreeSet<&&str> = types.iter().collect();
    assert_eq!(types.len(), unique.len());
    assert!(
        types.contains(&"karpenter_nodes_created counter"),
        "{types:?}"
    );
    assert!(types.contains(&"karpenter_nodes_allocatable gauge"));
    assert!(types.contains(&"karpenter_pods_startup_duration_seconds summary"));
    assert!(types.contains(&"controller_runtime_reconcile_time_seconds histogram"));
    // Every sample has a timestamp; the demo runs 3h: 37 snapshots, 5
    // minutes apart from the start, the same time for every series.
    let start = dovetail::clock::parse_rfc3339(demo.report["start"].as_str().unwrap())
        .unwrap()
        .as_second();
    let mut times = BTreeSet::new();
    let mut last: BTreeMap<String, i64> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        // `--metrics-label job=karpenter` on every sample.
        assert!(line.contains("job=\"karpenter\""), "{line}");
        let (series, rest) = line.rsplit_once(' ').unwrap();
        let ts: f64 = rest.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
        let ts = ts as i64;
        assert_eq!((ts - start) % 300, 0, "{line}");
        times.insert(ts);
        let key = series.rsplit_once(' ').unwrap().0.to_string();
        // Within a metric, points go forward in time.
        if let Some(prev) = last.insert(key.clone(), ts) {
            assert!(ts >= prev, "{key}: {prev} then {ts}");
        }
    }
    assert_eq!(times.len(), 37);
    assert_eq!(*times.first().unwrap(), start);
    assert_eq!(*times.last().unwrap(), start + 3 * 3600);
    // A counter never goes down: the nodes created by the end.
    let created: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("karpenter_nodes_created_total{")
                && l.ends_with(&format!(" {}.000", start + 3 * 3600))
        })
        .map(|l| l.split(' ').nth(1).unwrap().parse::<f64>().unwrap())
        .sum();
    let final_samples = parse_exposition(&demo.metrics);
    assert_eq!(
        created,
        value(&final_samples, "karpenter_nodes_created_total", &[])
    );
}

/// A Prometheus server on 127.0.0.1 over a TSDB directory, stopped (by its
/// own process id) when dropped.
struct Prometheus {
    child: std::process::Child,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

impl Prometheus {
    fn start(binary: &std::path::Path, data: &std::path::Path) -> Prometheus {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = data.join("prometheus.yml");
        std::fs::write(&config, "global: {}\n").unwrap();
        let child = std::process::Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            // The run's samples are at the demo's start, in January 2026:
            // kept whatever today's date.
            .arg("--storage.tsdb.retention.time=100y")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("prometheus starts");
        let p = Prometheus { child, port };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while p.get("/-/ready").0 != 200 {
            assert!(
                std::time::Instant::now() < deadline,
                "prometheus is not ready"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        p
    }

    /// `GET path` on the server: status and body (0 when it does not
    /// answer yet).
    fn get(&self, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return (0, String::new());
        };
        let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        let mut response = String::new();
        if s.read_to_string(&mut response).is_err() {
            return (0, String::new());
        }
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }
}

/// The dashboards' own queries, on Prometheus, over the demo's snapshots
/// backfilled with `promtool` (both built in `testbed/`, from Prometheus's
/// Go module). Every panel's query (node-exporter's aside) returns series
/// over the run, with the dashboards' variables as Grafana sets them by
/// default: every value of a multi-value variable, the saved choice of the
/// others.
#[test]
fn karpenter_s_dashboard_queries_answer_over_the_backfilled_demo() {
    let (prometheus, promtool) = (
        crate::testbed::bin().join("prometheus"),
        crate::testbed::bin().join("promtool"),
    );
    let demo = demo_outputs();
    let data = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&demo.snapshots_path)
        .arg(data.path())
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool refused the snapshots: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let server = Prometheus::start(&prometheus, data.path());
    let start = dovetail::clock::parse_rfc3339(demo.report["start"].as_str().unwrap())
        .unwrap()
        .as_second();
    let samples = parse_exposition(&demo.metrics);
    let mut asked = 0;
    let mut respelt = Vec::new();
    for file in [
        "karpenter-capacity-dashboard.json",
        "karpenter-performance-dashboard.json",
    ] {
        let path = root().join("charts/dovetail/dashboards").join(file);
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let d = dashboard(file);
        // Each variable's text as Grafana puts it into a query.
        let mut values: Vec<(String, String)> = vec![("__rate_interval".into(), "10m".into())];
        for var in v["templating"]["list"].as_array().unwrap() {
            let name = var["name"].as_str().unwrap();
            let Some(kind) = d.variables.get(name) else {
                continue;
            };
            let text = if var["multi"] == true || var["includeAll"] == true {
                // As Grafana escapes a multi-value variable for a regex
                // inside a PromQL string (`m7g\\.large`).
                let all = variable_values(kind, &samples);
                let escaped: Vec<String> = all
                    .iter()
                    .map(|s| regex::escape(s).replace('\\', "\\\\"))
                    .collect();
                format!("({})", escaped.join("|"))
            } else {
                var["current"]["value"].as_str().unwrap().to_string()
            };
            values.push((name.to_string(), text));
        }
        // Longer names first, so `$nodepool` never eats a longer name.
        values.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
        for expr in &d.exprs {
            let q = parse(expr);
            if q.selectors
                .iter()
                .all(|s| OTHER_EXPORTERS.contains(&s.metric.as_str()))
            {
                continue;
            }
            let mut query = expr.clone();
            for (name, text) in &values {
                query = query.replace(&format!("${name}"), text);
            }
            // Prometheus 3 stores a summary's `quantile` label (and a
            // histogram's `le`) as a float: what is exposed as
            // quantile="0" is stored as quantile="0.0". So the dashboard's
            // own `quantile="0"` and `quantile="1"` select nothing on
            // Prometheus 3, for Karpenter's metrics as for ours (README,
            // "Metrics and Karpenter's dashboards"); they are asked as
            // Prometheus 3 spells them, and counted.
            for (exposed, stored) in [
                ("quantile=\"0\"", "quantile=\"0.0\""),
                ("quantile=\"1\"", "quantile=\"1.0\""),
            ] {
                if query.contains(exposed) {
                    query = query.replace(exposed, stored);
                    respelt.push(query.clone());
                }
            }
            let (status, body) = server.get(&format!(
                "/api/v1/query_range?query={}&start={}&end={}&step=300",
                percent_encode(&query),
                start,
                start + 3 * 3600
            ));
            assert_eq!(status, 200, "{file}: {query}\n{body}");
            let answer: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(answer["status"], "success", "{file}: {query}\n{body}");
            let result = answer["data"]["result"].as_array().unwrap();
            assert!(!result.is_empty(), "{file}: no series for\n  {query}");
            asked += 1;
        }
    }
    assert!(asked >= 25, "{asked} queries asked");
    // The quantiles as exposed are not in the TSDB: Prometheus 3's
    // normalisation, checked so that the README's note stays true.
    let (status, body) = server.get(&format!(
        "/api/v1/label/quantile/values?start={start}&end={}",
        start + 3 * 3600
    ));
    assert_eq!(status, 200, "{body}");
    let stored: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        stored["data"],
        serde_json::json!(["0.0", "0.5", "0.9", "0.99", "1.0"]),
        "the quantiles Prometheus stored"
    );
    assert_eq!(respelt.len(), 4, "{respelt:#?}");
    println!(
        "{asked} dashboard queries answered over the backfilled demo ({} with quantile=\"0\" or \"1\" asked as Prometheus 3 stores them)",
        respelt.len()
    );
}
