//! The `plan` report: JSON with exactly the CONVENTIONS keys, and a readable
//! text form.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::scheduling::SolveResult;

/// Bump when a key changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanReport {
    pub schema_version: u32,
    /// The solve alone, excluding input loading.
    pub solve_seconds: f64,
    pub nodeclaim_count: usize,
    pub nodeclaims: Vec<PlanNodeClaim>,
    pub existing_placements: Vec<PlanPlacement>,
    pub price_per_hour: f64,
    pub lower_bound_price_per_hour: f64,
    pub unschedulable: Vec<PlanUnschedulable>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanNodeClaim {
    pub nodepool: String,
    /// Allowed types, cheapest first.
    pub instance_types: Vec<String>,
    pub zones: Vec<String>,
    pub capacity_types: Vec<String>,
    pub pods: Vec<String>,
    /// Summed requests including daemonset overhead, as quantity strings.
    pub requests: BTreeMap<String, String>,
    pub price_per_hour: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanPlacement {
    pub node: String,
    pub pods: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanUnschedulable {
    pub pod: String,
    pub reason: String,
    /// The workload the pod belongs to (`Deployment default/web`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The reason per NodePool (`nodepool` null for reasons that concern no
    /// NodePool in particular).
    pub nodepools: Vec<PlanPoolReason>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanPoolReason {
    pub nodepool: Option<String>,
    pub reason: String,
}

/// Prices are reported to a millionth of a dollar (never as -0).
fn round(p: f64) -> f64 {
    let r = (p * 1e6).round() / 1e6;
    if r == 0.0 { 0.0 } else { r }
}

impl PlanReport {
    pub fn new(r: &SolveResult, solve_seconds: f64) -> Self {
        PlanReport {
            schema_version: SCHEMA_VERSION,
            solve_seconds,
            nodeclaim_count: r.nodeclaims.len(),
            nodeclaims: r
                .nodeclaims
                .iter()
                .map(|c| PlanNodeClaim {
                    nodepool: c.nodepool.clone(),
                    instance_types: c.instance_types.clone(),
                    zones: c.zones.clone(),
                    capacity_types: c.capacity_types.clone(),
                    pods: c.pods.clone(),
                    requests: c.requests.to_strings(),
                    price_per_hour: round(c.price),
                })
                .collect(),
            existing_placements: r
                .existing
                .iter()
                .map(|p| PlanPlacement {
                    node: p.node.clone(),
                    pods: p.pods.clone(),
                })
                .collect(),
            price_per_hour: round(r.price),
            lower_bound_price_per_hour: round(r.lower_bound),
            unschedulable: r
                .unschedulable
                .iter()
                .map(|u| PlanUnschedulable {
                    pod: u.pod.clone(),
                    reason: u.reason.clone(),
                    owner: None,
                    nodepools: vec![PlanPoolReason {
                        nodepool: None,
                        reason: u.reason.clone(),
                    }],
                })
                .collect(),
        }
    }

    /// True when every pod was placed (exit code 0).
    pub fn all_placed(&self) -> bool {
        self.unschedulable.is_empty()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// At most this many pods are listed per line in text output.
const TEXT_PODS: usize = 5;

fn plural(n: usize, w: &str) -> String {
    format!(
        "{} {w}{}",
        crate::diag::thousands(n),
        if n == 1 { "" } else { "s" }
    )
}

/// `a b c d e (+12 more)`.
fn some_of(pods: &[String]) -> String {
    let shown: Vec<&str> = pods.iter().take(TEXT_PODS).map(String::as_str).collect();
    let rest = pods.len().saturating_sub(TEXT_PODS);
    if rest > 0 {
        format!(
            "{} (+{} more)",
            shown.join(" "),
            crate::diag::thousands(rest)
        )
    } else {
        shown.join(" ")
    }
}

impl PlanReport {
    /// The one-line summary, printed first and last.
    fn summary(&self) -> String {
        let placed_existing: usize = self.existing_placements.iter().map(|p| p.pods.len()).sum();
        let new_pods: usize = self.nodeclaims.iter().map(|c| c.pods.len()).sum();
        format!(
            "{} ({} pods), ${:.4}/h (lower bound ${:.4}/h{}); {} on existing capacity; {} cannot be scheduled; solved in {:.3}s",
            plural(self.nodeclaim_count, "new NodeClaim"),
            crate::diag::thousands(new_pods),
            self.price_per_hour,
            self.lower_bound_price_per_hour,
            if self.lower_bound_price_per_hour > 0.0 {
                format!(
                    ", ratio {:.3}",
                    self.price_per_hour / self.lower_bound_price_per_hour
                )
            } else {
                String::new()
            },
            plural(placed_existing, "pod"),
            plural(self.unschedulable.len(), "pod"),
            self.solve_seconds
        )
    }
}

/// The text report: the summary, NodeClaims grouped when they are alike
/// (same NodePool, instance types, zones, capacity types and price), pods
/// on existing nodes, pods that cannot be scheduled grouped by workload and
/// reason, and the summary again, so a long report starts and ends with it.
impl fmt::Display for PlanReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        let mut groups: Vec<(&PlanNodeClaim, Vec<&PlanNodeClaim>)> = Vec::new();
        for c in &self.nodeclaims {
            let alike = |g: &PlanNodeClaim| {
                g.nodepool == c.nodepool
                    && g.instance_types == c.instance_types
                    && g.zones == c.zones
                    && g.capacity_types == c.capacity_types
                    && g.price_per_hour == c.price_per_hour
            };
            match groups.iter_mut().find(|(g, _)| alike(g)) {
                Some((_, members)) => members.push(c),
                None => groups.push((c, vec![c])),
            }
        }
        for (c, members) in &groups {
            let pods: Vec<String> = members
                .iter()
                .flat_map(|m| m.pods.iter().cloned())
                .collect();
            let more = c.instance_types.len().saturating_sub(3);
            if members.len() == 1 {
                let req: Vec<String> = c.requests.iter().map(|(k, v)| format!("{k}={v}")).collect();
                writeln!(
                    f,
                    "  NodeClaim: nodepool {}, ${:.4}/h, {}, requests {}",
                    c.nodepool,
                    c.price_per_hour,
                    plural(c.pods.len(), "pod"),
                    req.join(",")
                )?;
            } else {
                writeln!(
                    f,
                    "  {} alike: nodepool {}, ${:.4}/h each, {} in all",
                    plural(members.len(), "NodeClaim"),
                    c.nodepool,
                    c.price_per_hour,
                    plural(pods.len(), "pod"),
                )?;
            }
            writeln!(
                f,
                "    types {}{}; zones {}; capacity types {}",
                c.instance_types
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(","),
                if more > 0 {
                    format!(" (+{more} more)")
                } else {
                    String::new()
                },
                c.zones.join(","),
                c.capacity_types.join(",")
            )?;
            writeln!(f, "    pods {}", some_of(&pods))?;
        }
        let placed_existing: usize = self.existing_placements.iter().map(|p| p.pods.len()).sum();
        if placed_existing > 0 {
            writeln!(
                f,
                "{} fit on existing capacity:",
                plural(placed_existing, "pod")
            )?;
            for p in &self.existing_placements {
                writeln!(f, "  {}: {}", p.node, some_of(&p.pods))?;
            }
        }
        if !self.unschedulable.is_empty() {
            writeln!(
                f,
                "{} cannot be scheduled:",
                plural(self.unschedulable.len(), "pod")
            )?;
            let mut groups: Vec<(Option<&str>, &str, Vec<String>)> = Vec::new();
            for u in &self.unschedulable {
                let key = (u.owner.as_deref(), u.reason.as_str());
                match groups.iter_mut().find(|(o, r, _)| (*o, *r) == key) {
                    Some((_, _, pods)) => pods.push(u.pod.clone()),
                    None => groups.push((key.0, key.1, vec![u.pod.clone()])),
                }
            }
            for (owner, reason, pods) in groups {
                match (owner, pods.len()) {
                    (_, 1) => writeln!(f, "  {}: {reason}", pods[0])?,
                    (Some(o), n) => writeln!(
                        f,
                        "  {} of {o}: {reason}\n    pods {}",
                        plural(n, "pod"),
                        some_of(&pods)
                    )?,
                    (None, n) => writeln!(
                        f,
                        "  {}: {reason}\n    pods {}",
                        plural(n, "pod"),
                        some_of(&pods)
                    )?,
                }
            }
        }
        if self.nodeclaims.len() + placed_existing + self.unschedulable.len() > 10 {
            writeln!(f, "{}", self.summary())?;
        }
        Ok(())
    }
}
