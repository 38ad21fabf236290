//! `diff --impact`: the inputs of [`crate::config::diff::impact`] (the two sides'
//! objects, the node set from a snapshot or a live cluster, the catalog) and
//! the impact section of the text, Markdown and JSON outputs.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::render::Style;
use crate::api::NodeClaim;
use crate::config::diff::impact::{self, AffectedNode, Config, ImpactReport, NodePoolImpact};
use crate::config::validate::Object;
use crate::drift::{NodeView, RequirementsError};
use crate::model::InstanceType;
use crate::model::catalog::{CatalogError, read_catalog};
use crate::snapshot::{self, Located, ReadError};
use crate::timing::{DurationSyntax, NillableDuration, parse_duration};

/// Why the impact could not be computed (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ImpactError {
    #[error("--impact needs the cluster's nodes: --snapshot FILE or --cluster")]
    NoNodes,
    #[error("--replacement-time: {0}")]
    ReplacementTime(String),
    #[error("snapshot: {0}")]
    Snapshot(ReadError),
    #[error("{file}: {message}")]
    Nodes { file: String, message: String },
    #[error("catalog")]
    Catalog(#[source] CatalogError),
    #[error(transparent)]
    Requirements(#[from] RequirementsError),
}

impl ImpactError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            ImpactError::NoNodes | ImpactError::Snapshot(ReadError::Io { .. }) => Some(
                "write a snapshot with `dovetail snapshot --out-file FILE` (or `kubectl get nodes,nodeclaims -o yaml`)",
            ),
            ImpactError::ReplacementTime(_) => Some("use a duration such as 5m or 1h30m"),
            _ => None,
        }
    }
}

/// The settings of `--impact`, checked before anything is read.
#[derive(Debug, Clone)]
pub struct Settings {
    pub replacement_time: Duration,
    pub catalog: Option<Vec<InstanceType>>,
}

impl Settings {
    pub fn read(replacement_time: &str, catalog: Option<&Path>) -> Result<Settings, ImpactError> {
        let replacement_time = match parse_duration(replacement_time, DurationSyntax::Hms) {
            Ok(NillableDuration::After(d)) => d,
            Ok(NillableDuration::Never) => {
                return Err(ImpactError::ReplacementTime(format!(
                    "invalid duration {replacement_time:?}: `Never` is not allowed here"
                )));
            }
            Err(e) => return Err(ImpactError::ReplacementTime(e)),
        };
        let catalog = catalog
            .map(read_catalog)
            .transpose()
            .map_err(ImpactError::Catalog)?;
        Ok(Settings {
            replacement_time,
            catalog,
        })
    }
}

/// The NodePools and EC2NodeClasses of validated objects; objects that do
/// not deserialise (an invalid `--from` side) are left out with a message.
pub fn config(objects: &[Object]) -> (Config, Vec<String>) {
    let mut config = Config::default();
    let mut skipped = Vec::new();
    for o in objects {
        if let Err(e) = config.insert_value(o.kind, &o.value) {
            skipped.push(format!("{}: {e}", o.file));
        }
    }
    (config, skipped)
}

/// The node set of a snapshot file.
pub fn nodes_from_snapshot(path: &Path) -> Result<Vec<NodeView>, ImpactError> {
    let file = path.display().to_string();
    let objects = snapshot::read_objects(path).map_err(ImpactError::Snapshot)?;
    nodes_from_objects(&file, &objects)
}

/// The node set of objects read from `file` (or listed from a cluster).
pub fn nodes_from_objects(file: &str, objects: &[Located]) -> Result<Vec<NodeView>, ImpactError> {
    // Checks every object's kind and the built-in kinds' types.
    let snap = snapshot::snapshot_from_objects(file, objects).map_err(ImpactError::Snapshot)?;
    let claims: Vec<NodeClaim> = objects
        .iter()
        .filter(|o| o.object.get("kind").and_then(Value::as_str) == Some("NodeClaim"))
        .map(|o| snapshot::typed(file, o))
        .collect::<Result<_, _>>()
        .map_err(ImpactError::Snapshot)?;
    impact::node_views(snap.nodes.iter().map(AsRef::as_ref), &claims).map_err(|message| {
        ImpactError::Nodes {
            file: file.to_string(),
            message,
        }
    })
}

/// Builds the report.
pub fn build(
    from: &[Object],
    to: &[Object],
    nodes: &[NodeView],
    settings: &Settings,
) -> Result<(ImpactReport, Vec<String>), ImpactError> {
    let (old, mut skipped) = config(from);
    let (new, skipped_new) = config(to);
    skipped.extend(skipped_new);
    let report = impact::build(&impact::ImpactInput {
        old: &old,
        new: &new,
        nodes,
        catalog: settings.catalog.as_deref(),
        replacement_time: settings.replacement_time,
    })?;
    Ok((report, skipped))
}

/// `1h5m`, `10m`, `30s`, `0s`.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        let _ = write!(out, "{h}h");
    }
    if m > 0 {
        let _ = write!(out, "{m}m");
    }
    if s > 0 || out.is_empty() {
        let _ = write!(out, "{s}s");
    }
    out
}

fn money(p: f64) -> String {
    format!("${p:.4}/h")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Whether a NodePool has anything to say.
fn notable(p: &NodePoolImpact) -> bool {
    !p.affected.is_empty() || p.limits_exceeded()
}

fn affected_summary(nodes: &[AffectedNode], of: usize) -> String {
    let certain = nodes.iter().filter(|n| n.is_certain()).count();
    let conditional = nodes.len() - certain;
    let mut s = format!("{certain} of {of} nodes would drift");
    if conditional > 0 {
        let _ = write!(
            s,
            ", {conditional} more if the new AMI selection resolves to a different image"
        );
    }
    s
}

fn pacing_line(p: &NodePoolImpact) -> Option<String> {
    let pacing = p.pacing.as_ref()?;
    if pacing.drifted == 0 {
        return None;
    }
    Some(if pacing.is_blocked() {
        "replacement: blocked by a budget of 0 nodes".to_string()
    } else {
        format!(
            "replacement: {} of up to {} at a time, about {}",
            plural(pacing.waves, "wave", "waves"),
            pacing.parallel,
            pacing.estimated.map_or_else(String::new, format_duration)
        )
    })
}

fn budget_lines(p: &NodePoolImpact) -> Vec<String> {
    let Some(pacing) = &p.pacing else {
        return Vec::new();
    };
    pacing
        .budgets
        .iter()
        .filter(|b| b.applies_to_drift)
        .map(|b| {
            let mut s = format!("budget nodes={} ({} at once)", b.nodes, b.allowed);
            if !b.reasons.is_empty() {
                let _ = write!(s, " for {}", b.reasons.join(", "));
            }
            if let (Some(schedule), Some(duration)) = (&b.schedule, &b.duration) {
                let _ = write!(s, " during `{schedule}` for {duration}");
                if b.allowed == 0 {
                    s.push_str(": replacement pauses in that window");
                }
            }
            s
        })
        .collect()
}

fn node_line(n: &AffectedNode) -> String {
    let mut s = n.name.clone();
    let mut meta = Vec::new();
    if let Some(it) = &n.instance_type {
        meta.push(it.clone());
    }
    if let Some(p) = n.price_per_hour {
        meta.push(money(p));
    }
    if !meta.is_empty() {
        let _ = write!(s, " ({})", meta.join(", "));
    }
    let reasons: Vec<String> = n.reasons.iter().map(ToString::to_string).collect();
    let _ = write!(s, ": {}", reasons.join("; "));
    s
}

fn exceeded_line(p: &NodePoolImpact) -> Option<String> {
    let over: Vec<String> = p
        .limits
        .iter()
        .filter(|l| l.exceeded)
        .map(|l| format!("{} {} > {}", l.resource, l.used, l.limit))
        .collect();
    (!over.is_empty()).then(|| {
        format!(
            "limits already exceeded: {} (no replacement can launch until usage falls below them)",
            over.join(", ")
        )
    })
}

/// One changed object's line: what it affects and what that costs.
fn heading(
    out: &mut String,
    title: &str,
    affected: &[AffectedNode],
    of: usize,
    price: Option<f64>,
) {
    let _ = write!(out, "  {title}: {}", affected_summary(affected, of));
    if let Some(price) = price {
        let _ = write!(out, ", {}", money(price));
    }
    out.push('\n');
}

/// The impact section of the text output.
pub fn text(r: &ImpactReport, skipped: &[String], style: Style) -> String {
    let mut out = format!(
        "\n{} on {} (replacement wave: {})\n",
        style.bold("impact"),
        plural(r.nodes, "node", "nodes"),
        format_duration(r.replacement_time)
    );
    let pools: Vec<&NodePoolImpact> = r.nodepools.iter().filter(|p| notable(p)).collect();
    let classes: Vec<_> = r
        .ec2nodeclasses
        .iter()
        .filter(|c| !c.affected.is_empty())
        .collect();
    if pools.is_empty() && classes.is_empty() {
        out.push_str("  no node would drift and no limit is exceeded\n");
    }
    for p in pools {
        let title = format!("NodePool/{} ({})", p.name, p.change);
        heading(&mut out, &title, &p.affected, p.nodes, p.price_per_hour);
        for line in exceeded_line(p)
            .into_iter()
            .chain(budget_lines(p))
            .chain(pacing_line(p))
        {
            let _ = writeln!(out, "    {line}");
        }
        for n in &p.affected {
            let _ = writeln!(out, "    - {}", node_line(n));
        }
    }
    for c in classes {
        let title = format!("EC2NodeClass/{} ({})", c.name, c.change);
        heading(&mut out, &title, &c.affected, c.nodes, c.price_per_hour);
        for n in &c.affected {
            let _ = writeln!(out, "    - {}", node_line(n));
        }
    }
    for s in skipped {
        let _ = writeln!(out, "  note: not considered: {s}");
    }
    out
}

fn md(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The impact section of the Markdown output.
pub fn markdown(r: &ImpactReport, skipped: &[String]) -> String {
    let mut out = format!(
        "\n### Impact on running nodes\n\n{} in the node set; one replacement wave takes about {}.\n\n",
        plural(r.nodes, "node", "nodes"),
        format_duration(r.replacement_time)
    );
    let pools: Vec<&NodePoolImpact> = r.nodepools.iter().filter(|p| notable(p)).collect();
    if pools.is_empty() {
        out.push_str("No node would drift and no limit is exceeded.\n");
    } else {
        out.push_str("| NodePool | Change | Drift | Limits | Replacement | Cost of affected nodes |\n|---|---|---|---|---|---:|\n");
        for p in &pools {
            let limits =
                exceeded_line(p).map_or_else(|| "ok".to_string(), |l| format!("**{}**", md(&l)));
            let pace = pacing_line(p).unwrap_or_default();
            let price = p.price_per_hour.map(money).unwrap_or_default();
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {limits} | {} | {price} |",
                md(&p.name),
                p.change,
                md(&affected_summary(&p.affected, p.nodes)),
                md(&pace)
            );
        }
        for p in pools.iter().filter(|p| !p.affected.is_empty()) {
            let _ = write!(
                out,
                "\n<details><summary><code>NodePool/{}</code>: {}</summary>\n\n",
                p.name.replace('<', "&lt;"),
                plural(p.affected.len(), "node", "nodes")
            );
            for line in budget_lines(p) {
                let _ = writeln!(out, "- {}", md(&line));
            }
            for n in &p.affected {
                let _ = writeln!(out, "- `{}`", md(&node_line(n)).replace('`', "'"));
            }
            out.push_str("\n</details>\n");
        }
    }
    for s in skipped {
        let _ = writeln!(out, "\n- note: not considered: {}", md(s));
    }
    out
}

fn affected_json(n: &AffectedNode) -> Value {
    json!({
        "node": n.name,
        "nodeclaim": n.nodeclaim,
        "instance_type": n.instance_type,
        "certain": n.is_certain(),
        "reasons": n.reasons.iter().map(|r| json!({"code": r.code(), "message": r.to_string()})).collect::<Vec<_>>(),
        "price_per_hour": n.price_per_hour,
    })
}

/// The `impact` object of the JSON output.
pub fn json(r: &ImpactReport, skipped: &[String]) -> Value {
    json!({
        "nodes": r.nodes,
        "replacement_seconds_per_wave": r.replacement_time.as_secs(),
        "priced": r.priced,
        "affected_nodes": r.affected_nodes().iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        "nodepools": r.nodepools.iter().map(|p| json!({
            "name": p.name,
            "change": p.change.as_str(),
            "nodes": p.nodes,
            "affected": p.affected.iter().map(affected_json).collect::<Vec<_>>(),
            "limits": p.limits.iter().map(|l| json!({
                "resource": l.resource, "limit": l.limit, "used": l.used, "exceeded": l.exceeded,
            })).collect::<Vec<_>>(),
            "limits_exceeded": p.limits_exceeded(),
            "pacing": p.pacing.as_ref().map(|pc| json!({
                "drifted": pc.drifted,
                "parallel": pc.parallel,
                "waves": pc.waves,
                "blocked": pc.is_blocked(),
                "estimated_seconds": pc.estimated.map(|d| d.as_secs()),
                "budgets": pc.budgets.iter().map(|b| json!({
                    "nodes": b.nodes,
                    "allowed": b.allowed,
                    "reasons": b.reasons,
                    "schedule": b.schedule,
                    "duration": b.duration,
                    "applies_to_drift": b.applies_to_drift,
                })).collect::<Vec<_>>(),
            })),
            "price_per_hour": p.price_per_hour,
            "unpriced": p.unpriced,
        })).collect::<Vec<_>>(),
        "ec2nodeclasses": r.ec2nodeclasses.iter().map(|c| json!({
            "name": c.name,
            "change": c.change.as_str(),
            "nodes": c.nodes,
            "affected": c.affected.iter().map(affected_json).collect::<Vec<_>>(),
            "price_per_hour": c.price_per_hour,
            "unpriced": c.unpriced,
        })).collect::<Vec<_>>(),
        "skipped": skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_the_api_writes_them() {
        assert_eq!(format_duration(Duration::from_secs(0)), "0s");
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
        assert_eq!(format_duration(Duration::from_secs(3900)), "1h5m");
        assert_eq!(format_duration(Duration::from_secs(61)), "1m1s");
    }

    #[test]
    fn settings_refuse_a_bad_replacement_time() {
        let e = Settings::read("5 minutes", None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--replacement-time: invalid duration"),
            "{e}"
        );
        assert!(e.hint().is_some());
        assert_eq!(
            Settings::read("1h30m", None).unwrap().replacement_time,
            Duration::from_secs(5400)
        );
    }

    #[test]
    fn a_missing_snapshot_names_the_file_with_a_hint() {
        let e = nodes_from_snapshot(Path::new("/nonexistent/snap.yaml")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/snap.yaml"), "{e}");
        assert!(e.hint().unwrap().contains("dovetail snapshot"));
    }
}
