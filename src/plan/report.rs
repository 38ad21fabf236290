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
}

/// Prices are reported to a millionth of a dollar.
fn round(p: f64) -> f64 {
    (p * 1e6).round() / 1e6
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

/// At most this many pods are listed per NodeClaim in text output.
const TEXT_PODS: usize = 5;

impl fmt::Display for PlanReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let placed_existing: usize = self.existing_placements.iter().map(|p| p.pods.len()).sum();
        writeln!(
            f,
            "{} new NodeClaim(s), ${:.4}/h (lower bound ${:.4}/h{}), solved in {:.3}s",
            self.nodeclaim_count,
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
            self.solve_seconds
        )?;
        for (i, c) in self.nodeclaims.iter().enumerate() {
            let req: Vec<String> = c.requests.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let more = c.instance_types.len().saturating_sub(3);
            writeln!(
                f,
                "  nodeclaim {i}: nodepool {}, ${:.4}/h, {} pod(s), requests {}",
                c.nodepool,
                c.price_per_hour,
                c.pods.len(),
                req.join(",")
            )?;
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
            let shown: Vec<&str> = c.pods.iter().take(TEXT_PODS).map(String::as_str).collect();
            let rest = c.pods.len().saturating_sub(TEXT_PODS);
            writeln!(
                f,
                "    pods {}{}",
                shown.join(" "),
                if rest > 0 {
                    format!(" (+{rest} more)")
                } else {
                    String::new()
                }
            )?;
        }
        if placed_existing > 0 {
            writeln!(f, "{placed_existing} pod(s) fit on existing capacity:")?;
            for p in &self.existing_placements {
                writeln!(f, "  {}: {}", p.node, p.pods.join(" "))?;
            }
        }
        if !self.unschedulable.is_empty() {
            writeln!(
                f,
                "{} pod(s) cannot be scheduled:",
                self.unschedulable.len()
            )?;
            for u in &self.unschedulable {
                writeln!(f, "  {}: {}", u.pod, u.reason)?;
            }
        }
        Ok(())
    }
}
