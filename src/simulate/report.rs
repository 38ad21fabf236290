//! The simulation's report: nodes, pods, events, unschedulable pods and a
//! summary, as JSON (`schema_version` 1, snake_case keys) and as a readable
//! timeline. Everything is ordered and timestamped by the virtual clock, so
//! the same scenario gives byte-identical reports.
//!
//! `series` holds the fleet and the pending pods on one time axis (at most
//! `SERIES_POINTS` points each), computed at the end from the nodes and pods.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Serialize;

use crate::clock::{Timestamp, format_rfc3339};
use crate::cloud::{Instance, InstanceState};
use crate::cluster::{EventType, Selector};
use crate::controller::{Decision, Event};
use crate::diag::thousands;
use crate::world::MemoryCluster;
use crate::world::ec2::InstanceView;
use crate::world::kubelet::KubeletReport;

/// The reason given for a pod pending at the end of a run that the last
/// solve did not call unschedulable: capacity was planned for it.
pub const WAITING_FOR_CAPACITY: &str = "waiting for capacity";

/// Prices and costs in the JSON report: to a millionth of a dollar (a sum
/// of float prices prints as 0.30000000000000004 otherwise).
fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn rounded<S: serde::Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round6(*x))
}

fn secs(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

#[derive(Debug, Clone, Serialize)]
pub struct ReportEvent {
    /// Seconds since the start.
    pub t: f64,
    pub kind: String,
    pub object: String,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeRecord {
    pub name: String,
    pub instance_id: String,
    pub nodepool: String,
    pub instance_type: String,
    pub zone: String,
    /// Its capacity type at the end (or when it was deleted): a node whose
    /// capacity reservation ended runs on demand.
    pub capacity_type: String,
    /// Its hourly price at the end (or when it was deleted).
    #[serde(serialize_with = "rounded")]
    pub price_per_hour: f64,
    pub launched_at: String,
    pub deleted_at: Option<String>,
    pub disruption_reason: Option<String>,
    /// When the node was tainted `karpenter.sh/disrupted` for a disruption.
    pub disruption_started_at: Option<String>,
    /// The NodeClaims launched to replace it (empty for a delete).
    pub replaced_by: Vec<String>,
    pub nodeclaim: String,
    pub pods: Vec<String>,
    #[serde(skip)]
    launched: Option<Timestamp>,
    #[serde(skip)]
    deleted: Option<Timestamp>,
    /// When its price changed, and the price until then, oldest first.
    #[serde(skip)]
    repriced: Vec<(Timestamp, f64)>,
    /// The capacity reservation it was launched into.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// The placement group it was launched into.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_group: Option<String>,
    /// Its partition, in a partition placement group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_partition: Option<String>,
}

impl NodeRecord {
    /// The record of an instance first seen.
    fn launched(i: &Instance) -> NodeRecord {
        NodeRecord {
            name: String::new(),
            instance_id: i.id.clone(),
            nodepool: i.nodepool.clone(),
            instance_type: i.instance_type.clone(),
            zone: i.zone.clone(),
            capacity_type: i.capacity_type.clone(),
            price_per_hour: i.price,
            launched_at: format_rfc3339(i.launched_at),
            deleted_at: None,
            disruption_reason: None,
            disruption_started_at: None,
            replaced_by: Vec::new(),
            nodeclaim: i.nodeclaim.clone(),
            pods: Vec::new(),
            launched: Some(i.launched_at),
            deleted: None,
            repriced: Vec::new(),
            reservation: i
                .labels
                .get(crate::api::LABEL_CAPACITY_RESERVATION_ID)
                .cloned(),
            placement_group: i
                .labels
                .get(crate::model::labels::PLACEMENT_GROUP_ID)
                .cloned(),
            placement_partition: i
                .labels
                .get(crate::model::labels::PLACEMENT_GROUP_PARTITION)
                .cloned(),
        }
    }

    /// When it was launched and deleted.
    pub fn lifetime(&self) -> (Option<Timestamp>, Option<Timestamp>) {
        (self.launched, self.deleted)
    }
}

impl NodeRecord {
    /// What it cost from its launch until it was deleted or `end`, at each
    /// price it had.
    fn cost(&self, end: Timestamp) -> f64 {
        let to = self.deleted.unwrap_or(end);
        let mut from = self.launched.unwrap_or(end);
        let mut cost = 0.0;
        for (at, price) in &self.repriced {
            let until = (*at).min(to);
            cost += price * secs(from, until) / 3600.0;
            from = until;
        }
        cost + self.price_per_hour * secs(from, to) / 3600.0
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PodRecord {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub pending_seconds: f64,
    pub phase: String,
    pub deleted_at: Option<String>,
    /// When its deletion began: its `deletionTimestamp` less its grace
    /// period, as an accepted eviction or a delete set it; absent if it
    /// never terminated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminating_at: Option<String>,
    #[serde(skip)]
    created: Option<Timestamp>,
    #[serde(skip)]
    bound: Option<Timestamp>,
    #[serde(skip)]
    deleted: Option<Timestamp>,
    #[serde(skip)]
    daemon: bool,
    #[serde(skip)]
    job: bool,
    /// `Deployment/namespace/name`: what the text report groups pods by.
    #[serde(skip)]
    workload: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Unschedulable {
    pub pod: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub duration_seconds: f64,
    pub cost_usd: f64,
    pub nodes_launched: usize,
    pub nodes_terminated: usize,
    pub disruptions_by_reason: BTreeMap<String, usize>,
    pub evictions: usize,
    pub pods_created: usize,
    /// Pods neither bound, finished nor deleted at the end of the run.
    pub pods_pending: usize,
    pub max_pending_seconds: f64,
    pub p50_pending_seconds: f64,
    pub p99_pending_seconds: f64,
    pub price_per_hour: f64,
    pub lower_bound_price_per_hour: Option<f64>,
    pub cloud_calls: usize,
    /// What separates the final fleet from the lower bound.
    pub gap: Gap,
    /// Cost and utilization per NodePool, by name.
    pub nodepools: Vec<PoolSummary>,
}

/// One NodePool's share of a run.
#[derive(Debug, Clone, Serialize)]
pub struct PoolSummary {
    pub nodepool: String,
    pub nodes_launched: usize,
    /// Nodes still running at the end.
    pub nodes: usize,
    pub cost_usd: f64,
    /// The hourly price of its nodes at the end.
    pub price_per_hour: f64,
    /// Requested / allocatable cpu and memory on its nodes at the end
    /// (DaemonSet pods included), from 0 to 1.
    pub cpu_utilization: f64,
    pub memory_utilization: f64,
}

/// Allocatable and requested cpu and memory of each NodePool's nodes.
#[derive(Debug, Clone, Default)]
pub struct PoolUsage {
    allocatable: crate::model::Resources,
    requested: crate::model::Resources,
}

/// What each NodePool's nodes hold now: their allocatable, and the requests
/// of the pods bound to them.
pub fn usage_by_pool(cluster: &MemoryCluster) -> BTreeMap<String, PoolUsage> {
    use crate::model::Resources;
    let mut usage: BTreeMap<String, PoolUsage> = BTreeMap::new();
    let mut pool_of: BTreeMap<String, String> = BTreeMap::new();
    for n in cluster.list::<Node>(None, &Selector::everything()).items {
        let Some(pool) = n
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::api::LABEL_NODEPOOL))
        else {
            continue;
        };
        let entry = usage.entry(pool.clone()).or_default();
        if let Some(a) = n.status.as_ref().and_then(|s| s.allocatable.as_ref())
            && let Ok(r) = Resources::from_k8s(a)
        {
            entry.allocatable.add(&r);
        }
        if let Some(name) = &n.metadata.name {
            pool_of.insert(name.clone(), pool.clone());
        }
    }
    for p in cluster.list::<Pod>(None, &Selector::everything()).items {
        let Some(pool) = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(|n| pool_of.get(n))
        else {
            continue;
        };
        if terminal(&phase(&p)) || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Ok(r) = crate::scheduling::pod::pod_requests(&crate::api::SlimPod::from(&*p))
            && let Some(u) = usage.get_mut(pool)
        {
            u.requested.add(&r);
        }
    }
    usage
}

/// How far a run has got, for progress on a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Simulated time reached, and the time the run ends at.
    pub simulated: std::time::Duration,
    pub until: std::time::Duration,
    /// Pods neither finished nor deleted, those of them not bound yet, and
    /// running nodes.
    pub pods: usize,
    pub pending: usize,
    pub nodes: usize,
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hms = |d: std::time::Duration| offset(d.as_secs_f64());
        write!(
            f,
            "simulate: {} of {} simulated, {} pods ({} pending), {} nodes",
            hms(self.simulated).trim_start_matches('+'),
            hms(self.until).trim_start_matches('+'),
            crate::diag::thousands(self.pods),
            crate::diag::thousands(self.pending),
            crate::diag::thousands(self.nodes),
        )
    }
}

/// What separates a fleet from the lower bound of its workload: the bound
/// buys exactly the resources the pods request, at the best price per
/// unit, with no DaemonSet on each node and no topology to respect.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Gap {
    /// Share of the fleet's allocatable cpu and memory no pod requests:
    /// nodes come in whole instance types.
    pub idle_cpu_share: f64,
    pub idle_memory_share: f64,
    /// Share of the fleet's allocatable cpu and memory DaemonSet pods take
    /// (once per node).
    pub daemonset_cpu_share: f64,
    pub daemonset_memory_share: f64,
    /// Workloads spread over zones (a `DoNotSchedule` zone topology
    /// spread): each zone they use needs a node of its own.
    pub zone_spread: Vec<ZoneSpread>,
}

/// A workload spread over zones, and the zones its pods run in.
#[derive(Debug, Clone, Serialize)]
pub struct ZoneSpread {
    /// `Deployment/namespace/name` (or the pods' owner), else `namespace/pod`.
    pub workload: String,
    pub zones: usize,
}

/// The gap between the cluster's fleet and its workload now.
pub fn gap(cluster: &MemoryCluster) -> Gap {
    use crate::model::Resources;
    use crate::model::quantity::{CPU, MEMORY};
    let nodes = cluster.list::<Node>(None, &Selector::everything()).items;
    let zone_of: BTreeMap<String, String> = nodes
        .iter()
        .filter_map(|n| {
            Some((
                n.metadata.name.clone()?,
                n.metadata
                    .labels
                    .as_ref()?
                    .get(crate::api::LABEL_ZONE)?
                    .clone(),
            ))
        })
        .collect();
    let mut alloc = Resources::new();
    for n in &nodes {
        if let Some(a) = n.status.as_ref().and_then(|s| s.allocatable.as_ref())
            && let Ok(r) = Resources::from_k8s(a)
        {
            alloc.add(&r);
        }
    }
    let mut used = Resources::new();
    let mut daemon = Resources::new();
    let mut spread: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for p in cluster.list::<Pod>(None, &Selector::everything()).items {
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        if terminal(&phase(&p)) || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Ok(r) = crate::scheduling::pod::pod_requests(&crate::api::SlimPod::from(&*p)) else {
            continue;
        };
        used.add(&r);
        let owner = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        if owner.is_some_and(|o| o.kind == "DaemonSet") {
            daemon.add(&r);
        }
        let zonal = p
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.topology_key == crate::api::LABEL_ZONE
                        && c.when_unsatisfiable == "DoNotSchedule"
                })
            });
        if zonal && let Some(zone) = zone_of.get(node) {
            let ns = p.metadata.namespace.as_deref().unwrap_or("default");
            // Deployment pods are named after it by the stand-in controller.
            let workload = match owner {
                Some(o) => format!("{}/{ns}/{}", o.kind, o.name),
                None => format!("{ns}/{}", p.metadata.name.as_deref().unwrap_or_default()),
            };
            spread.entry(workload).or_default().insert(zone.clone());
        }
    }
    let share = |part: &Resources, key: &str| -> f64 {
        let total = alloc.get(key);
        if total <= 0 {
            return 0.0;
        }
        ((part.get(key) as f64 / total as f64) * 1e4).round() / 1e4
    };
    let mut idle = alloc.clone();
    idle.sub(&used);
    Gap {
        idle_cpu_share: share(&idle, CPU).max(0.0),
        idle_memory_share: share(&idle, MEMORY).max(0.0),
        daemonset_cpu_share: share(&daemon, CPU),
        daemonset_memory_share: share(&daemon, MEMORY),
        zone_spread: spread
            .into_iter()
            .map(|(workload, zones)| ZoneSpread {
                workload,
                zones: zones.len(),
            })
            .collect(),
    }
}

/// A disruption decision carried out.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRecord {
    /// Seconds since the start.
    pub t: f64,
    pub reason: String,
    pub decision: String,
    pub consolidation_type: String,
    pub nodeclaims: Vec<String>,
    pub replacements: Vec<String>,
    pub replacement_types: Vec<Vec<String>>,
    pub savings_per_hour: f64,
}

/// The fleet at one time: its nodes and hourly price, and the lower bound
/// on the price of capacity for the workload then.
#[derive(Debug, Clone, Serialize)]
pub struct FleetPoint {
    /// Seconds since the start.
    pub t: f64,
    pub nodes: usize,
    pub price_per_hour: f64,
    pub lower_bound_price_per_hour: Option<f64>,
}

/// At most this many intervals in [`Series`], whatever the run's length.
pub const SERIES_POINTS: usize = 720;
/// The intervals [`Series`] may use, in seconds: the shortest that keeps
/// a run within [`SERIES_POINTS`].
const SERIES_STEPS: [u64; 17] = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200,
];

/// The fleet and the pending pods over the run, on one time axis, as the
/// HTML report draws them. Each value is the largest the quantity reached
/// in the interval ending at its time (so a node that lived a minute, or a
/// burst of pending pods, still shows); the first point is the value at
/// the start.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Series {
    /// Seconds between points (the last interval ends at the run's end and
    /// may be shorter).
    pub step_seconds: f64,
    /// Seconds since the start of each point.
    pub t: Vec<f64>,
    /// Nodes running (from their instance's launch to its termination), per
    /// NodePool.
    pub nodes: BTreeMap<String, Vec<usize>>,
    /// The fleet's hourly price (USD).
    pub price_per_hour: Vec<f64>,
    /// The lower bound of the workload's price then: `fleet[]`'s last
    /// sample at or before the point (sampled every 15 minutes), null
    /// before the first or when none could be computed.
    pub lower_bound_price_per_hour: Vec<Option<f64>>,
    /// Pods pending: created and neither bound, finished nor deleted
    /// (DaemonSet pods left out, as in the pending percentiles).
    pub pending_pods: Vec<usize>,
}

/// A step function given by its changes `(t, delta)`, as the largest value
/// in each interval `(t[i-1], t[i]]` of `grid` (the first point: the value
/// at `grid[0]`). Changes at one time apply together.
fn peak_per_interval(mut changes: Vec<(f64, f64)>, grid: &[f64]) -> Vec<f64> {
    changes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = Vec::with_capacity(grid.len());
    let mut value = 0.0;
    let mut i = 0;
    for (k, &t) in grid.iter().enumerate() {
        let mut peak = if k == 0 { f64::NEG_INFINITY } else { value };
        while i < changes.len() && changes[i].0 <= t {
            let at = changes[i].0;
            while i < changes.len() && changes[i].0 == at {
                value += changes[i].1;
                i += 1;
            }
            if k > 0 {
                peak = peak.max(value);
            }
        }
        out.push(if k == 0 { value } else { peak });
    }
    out
}

impl Series {
    /// The series of a run of `duration` seconds. `nodes` are (pool,
    /// from, to, price) and `pending` (from, to), in seconds since the
    /// start, `to` None while it lasts; `fleet` the fleet samples.
    fn build(
        duration: f64,
        nodes: &[(&str, f64, Option<f64>, f64)],
        pending: &[(f64, Option<f64>)],
        fleet: &[FleetPoint],
    ) -> Series {
        let step = SERIES_STEPS
            .iter()
            .copied()
            .find(|s| duration / (*s as f64) <= SERIES_POINTS as f64)
            .unwrap_or(86_400) as f64;
        let mut t: Vec<f64> = (0..)
            .map(|i| f64::from(i) * step)
            .take_while(|x| *x < duration)
            .collect();
        t.push(duration);
        let span = |from: f64, to: Option<f64>, amount: f64| {
            let mut c = vec![(from.max(0.0), amount)];
            if let Some(to) = to {
                c.push((to.max(0.0), -amount));
            }
            c
        };
        let mut by_pool: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        let mut price = Vec::new();
        for (pool, from, to, p) in nodes {
            by_pool
                .entry(pool.to_string())
                .or_default()
                .extend(span(*from, *to, 1.0));
            price.extend(span(*from, *to, *p));
        }
        let pending: Vec<(f64, f64)> = pending
            .iter()
            .flat_map(|(from, to)| span(*from, *to, 1.0))
            .collect();
        let count = |v: Vec<f64>| v.into_iter().map(|x| x.round().max(0.0) as usize).collect();
        let mut bound = Vec::with_capacity(t.len());
        let mut f = fleet.iter().peekable();
        let mut last = None;
        for x in &t {
            while let Some(p) = f.next_if(|p| p.t <= *x) {
                last = Some(p.lower_bound_price_per_hour);
            }
            bound.push(last.flatten());
        }
        Series {
            step_seconds: step,
            nodes: by_pool
                .into_iter()
                .map(|(pool, c)| (pool, count(peak_per_interval(c, &t))))
                .collect(),
            price_per_hour: peak_per_interval(price, &t)
                .into_iter()
                .map(|x| round6(x.max(0.0)))
                .collect(),
            lower_bound_price_per_hour: bound,
            pending_pods: count(peak_per_interval(pending, &t)),
            t,
        }
    }
}

/// The JSON report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub start: String,
    pub end: String,
    pub nodes: Vec<NodeRecord>,
    pub pods: Vec<PodRecord>,
    pub events: Vec<ReportEvent>,
    /// Disruption decisions carried out, with their savings.
    pub disruptions: Vec<DecisionRecord>,
    /// The fleet's price against the workload's lower bound over time.
    pub fleet: Vec<FleetPoint>,
    /// Nodes per NodePool, price, lower bound and pending pods on one
    /// time axis (what the HTML report draws).
    pub series: Series,
    pub unschedulable: Vec<Unschedulable>,
    /// The nodes a disruption wanted but could not take at the end (the
    /// controller's last disruption pass), each with its blocker.
    pub blocked: Vec<crate::disruption::Blocked>,
    pub summary: Summary,
    /// Wall-clock time from the receipt of each interruption message to
    /// its handling done (NodeClaims marked for deletion), in delivery
    /// order. A measurement of this run, so not in the JSON (which is the
    /// same on every run).
    #[serde(skip)]
    pub interruption_handling: Vec<std::time::Duration>,
    /// The controller's interruption metrics at the end of the run.
    #[serde(skip)]
    pub interruption_metrics: Option<crate::interruption::Metrics>,
    /// The controller's metrics, when the run kept them
    /// ([`super::driver::Simulation::with_metrics`]).
    #[serde(skip)]
    pub metrics: Option<RunMetrics>,
}

/// Collects what happens during a run.
pub struct Recorder {
    start: Timestamp,
    events: Vec<ReportEvent>,
    pods: BTreeMap<String, PodRecord>,
    /// By instance id.
    nodes: BTreeMap<String, NodeRecord>,
    pod_version: u64,
    /// The Node revision and the instances the node records were last
    /// brought up to: nothing to do until either changes.
    nodes_seen: Option<(u64, InstanceView)>,
    evictions: usize,
    decisions: Vec<DecisionRecord>,
    fleet: Vec<FleetPoint>,
    /// Active pods owned by Jobs: their completions are due on their own.
    active_jobs: usize,
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into())
}

fn terminal(phase: &str) -> bool {
    crate::api::pod::is_finished_phase(Some(phase))
}

fn kind_of(object: &str) -> String {
    object.split('/').next().unwrap_or_default().to_string()
}

impl Recorder {
    pub fn new(start: Timestamp) -> Self {
        Recorder {
            start,
            events: Vec::new(),
            pods: BTreeMap::new(),
            nodes: BTreeMap::new(),
            pod_version: 0,
            nodes_seen: None,
            evictions: 0,
            decisions: Vec::new(),
            fleet: Vec::new(),
            active_jobs: 0,
        }
    }

    pub fn event(&mut self, t: Timestamp, object: String, reason: &str, message: String) {
        self.events.push(ReportEvent {
            t: secs(self.start, t),
            kind: kind_of(&object),
            object,
            reason: reason.to_string(),
            message,
        });
    }

    /// Where the run stands at `now`, simulated from the start to `until`.
    pub fn progress(&self, now: Timestamp, until: Timestamp) -> Progress {
        let duration = |t: Timestamp| std::time::Duration::from_secs_f64(secs(self.start, t));
        let active = self
            .pods
            .values()
            .filter(|p| p.deleted.is_none() && !terminal(&p.phase));
        let (mut pods, mut pending) = (0, 0);
        for p in active {
            pods += 1;
            if p.bound.is_none() {
                pending += 1;
            }
        }
        Progress {
            simulated: duration(now),
            until: duration(until),
            pods,
            pending,
            nodes: self.nodes.values().filter(|n| n.deleted.is_none()).count(),
        }
    }

    /// Pods owned by Jobs that are neither finished nor deleted.
    pub fn active_job_pods(&self) -> usize {
        self.active_jobs
    }

    pub fn controller_events(&mut self, events: Vec<Event>) {
        for e in events {
            if e.reason == "Evicted" {
                self.evictions += 1;
            }
            let claim = e.object.strip_prefix("NodeClaim/");
            if let Some(claim) = claim
                && (e.kind == "Disruption"
                    || matches!(
                        e.reason.as_str(),
                        "RegistrationTimeout" | "NodeDeleted" | "InstanceGone"
                    ))
                && let Some(n) = self.nodes.values_mut().find(|n| n.nodeclaim == claim)
            {
                n.disruption_reason.get_or_insert_with(|| e.reason.clone());
                if e.kind == "Disruption" {
                    n.disruption_started_at
                        .get_or_insert_with(|| format_rfc3339(e.t));
                    n.replaced_by.clone_from(&e.related);
                }
            }
            self.events.push(ReportEvent {
                t: secs(self.start, e.t),
                kind: e.kind,
                object: e.object,
                reason: e.reason,
                message: e.message,
            });
        }
    }

    /// Disruption decisions carried out.
    pub fn decisions(&mut self, decisions: Vec<Decision>) {
        for d in decisions {
            self.decisions.push(DecisionRecord {
                t: secs(self.start, d.t),
                reason: d.reason,
                decision: d.decision,
                consolidation_type: d.consolidation_type,
                nodeclaims: d.nodeclaims,
                replacements: d.replacements,
                replacement_types: d.replacement_types,
                savings_per_hour: (d.savings_per_hour * 1e6).round() / 1e6,
            });
        }
    }

    /// A point of the fleet's price against the workload's lower bound.
    pub fn fleet_point(&mut self, t: Timestamp, lower_bound: Option<f64>) {
        let price: f64 = self
            .nodes
            .values()
            .filter(|n| n.deleted.is_none())
            .map(|n| n.price_per_hour)
            .sum();
        let nodes = self.nodes.values().filter(|n| n.deleted.is_none()).count();
        let round = |x: f64| (x * 1e6).round() / 1e6;
        self.fleet.push(FleetPoint {
            t: secs(self.start, t),
            nodes,
            price_per_hour: round(price),
            lower_bound_price_per_hour: lower_bound.map(round),
        });
    }

    pub fn kubelet(&mut self, now: Timestamp, k: &KubeletReport) {
        for n in &k.registered {
            self.event(
                now,
                format!("Node/{n}"),
                "NodeJoined",
                "kubelet registered the node".into(),
            );
        }
        for n in &k.deleted {
            self.event(
                now,
                format!("Node/{n}"),
                "NodeRemoved",
                "the instance is gone".into(),
            );
        }
        for p in &k.orphans_deleted {
            self.event(
                now,
                format!("Pod/{p}"),
                "PodGarbageCollected",
                "its node is gone".into(),
            );
        }
        for p in &k.completed {
            self.event(
                now,
                format!("Pod/{p}"),
                "Completed",
                "the job's pod finished".into(),
            );
        }
    }

    /// The stand-in attach-detach controller's attaches and detaches.
    pub fn volumes(&mut self, now: Timestamp, v: &crate::world::volumes::VolumeReport) {
        for (name, pv, node) in &v.attached {
            self.event(
                now,
                format!("VolumeAttachment/{name}"),
                "VolumeAttached",
                format!("{pv} attached to {node}"),
            );
        }
        for (name, pv, node) in &v.detached {
            self.event(
                now,
                format!("VolumeAttachment/{name}"),
                "VolumeDetached",
                format!("{pv} detached from {node}"),
            );
        }
    }

    fn upsert_pod(&mut self, p: &Pod, now: Timestamp, deleted: bool) {
        let ns = p
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = p.metadata.name.clone().unwrap_or_default();
        let key = format!("{ns}/{name}");
        let owner_kind = |kind: &str| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == kind)
        };
        let (daemon, job) = (owner_kind("DaemonSet"), owner_kind("Job"));
        let (is_new, record) = match self.pods.entry(key) {
            std::collections::btree_map::Entry::Occupied(o) => (false, o.into_mut()),
            std::collections::btree_map::Entry::Vacant(v) => (
                true,
                v.insert(PodRecord {
                    namespace: ns,
                    name,
                    node: None,
                    pending_seconds: 0.0,
                    phase: "Pending".into(),
                    deleted_at: None,
                    terminating_at: None,
                    created: Some(now),
                    bound: None,
                    deleted: None,
                    daemon,
                    job,
                    workload: crate::convert::workload_of(&crate::api::SlimPod::from(p))
                        .map(|(kind, ns, name)| format!("{kind}/{ns}/{name}")),
                }),
            ),
        };
        let was_active = !is_new && record.deleted_at.is_none() && !terminal(&record.phase);
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            if record.bound.is_none() {
                record.bound = Some(now);
            }
            record.node = Some(node);
        }
        record.phase = phase(p);
        if record.terminating_at.is_none()
            && let Some(t) = p.metadata.deletion_timestamp.as_ref()
        {
            let grace = p
                .metadata
                .deletion_grace_period_seconds
                .and_then(|g| u64::try_from(g).ok())
                .unwrap_or(0);
            let began =
                t.0.checked_sub(std::time::Duration::from_secs(grace))
                    .unwrap_or(t.0);
            record.terminating_at = Some(format_rfc3339(began));
        }
        if deleted && record.deleted_at.is_none() {
            record.deleted_at = Some(format_rfc3339(now));
            record.deleted = Some(now);
        }
        let is_active = record.deleted_at.is_none() && !terminal(&record.phase);
        if job {
            match (was_active, is_active) {
                (true, false) => self.active_jobs -= 1,
                (false, true) => self.active_jobs += 1,
                _ => {}
            }
        }
    }

    /// Follows pods through the watch log and instances through the cloud.
    pub fn observe(&mut self, cluster: &MemoryCluster, instances: &InstanceView, now: Timestamp) {
        match cluster.watch_from::<Pod>(self.pod_version) {
            Ok(events) => {
                for e in events {
                    self.pod_version = self.pod_version.max(e.resource_version);
                    self.upsert_pod(&e.object, now, e.event_type == EventType::Deleted);
                }
            }
            Err(_) => {
                // The log was compacted: relist, as a watcher would. Pods
                // no longer listed went since the last look: now is the
                // closest to when they were gone that is known.
                self.pod_version = cluster.resource_version();
                let listed = cluster.list::<Pod>(None, &Selector::everything()).items;
                let mut present = std::collections::BTreeSet::new();
                for p in &listed {
                    self.upsert_pod(p, now, false);
                    present.insert(format!(
                        "{}/{}",
                        p.metadata.namespace.as_deref().unwrap_or("default"),
                        p.metadata.name.as_deref().unwrap_or_default()
                    ));
                }
                for (key, record) in self.pods.iter_mut() {
                    if record.deleted_at.is_none() && !present.contains(key) {
                        if record.job && !terminal(&record.phase) {
                            self.active_jobs = self.active_jobs.saturating_sub(1);
                        }
                        record.deleted_at = Some(format_rfc3339(now));
                        record.deleted = Some(now);
                    }
                }
            }
        }
        self.observe_nodes(cluster, instances, now);
    }

    /// Brings the node records up to the instances and their Nodes.
    fn observe_nodes(&mut self, cluster: &MemoryCluster, instances: &InstanceView, now: Timestamp) {
        let revision = cluster.kind_revision::<Node>();
        if self
            .nodes_seen
            .as_ref()
            .is_some_and(|(r, seen)| *r == revision && Arc::ptr_eq(seen, instances))
        {
            return;
        }
        self.nodes_seen = Some((revision, instances.clone()));
        let listed = cluster.list::<Node>(None, &Selector::everything()).items;
        let node_names: HashMap<&str, &str, foldhash::fast::RandomState> = listed
            .iter()
            .filter_map(|n| {
                Some((
                    n.spec.as_ref()?.provider_id.as_deref()?,
                    n.metadata.name.as_deref()?,
                ))
            })
            .collect();
        let live: HashSet<&str, foldhash::fast::RandomState> = instances
            .iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .map(|i| i.id.as_str())
            .collect();
        let follow = |rec: &mut NodeRecord, i: &Instance| {
            if let Some(&n) = node_names.get(i.provider_id.as_str())
                && rec.name != n
            {
                rec.name = n.to_string();
            }
            // A reservation ended under it: it runs on demand from now on.
            if rec.deleted.is_none()
                && (rec.price_per_hour != i.price || rec.capacity_type != i.capacity_type)
            {
                rec.repriced.push((now, rec.price_per_hour));
                rec.price_per_hour = i.price;
                rec.capacity_type.clone_from(&i.capacity_type);
            }
        };
        for i in instances.iter() {
            // Looked up before it is made: nearly every instance has its
            // record already.
            if let Some(rec) = self.nodes.get_mut(&i.id) {
                follow(rec, i);
            } else {
                let mut rec = NodeRecord::launched(i);
                follow(&mut rec, i);
                self.nodes.insert(i.id.clone(), rec);
            }
        }
        for rec in self.nodes.values_mut() {
            if rec.deleted.is_none() && !live.contains(rec.instance_id.as_str()) {
                rec.deleted = Some(now);
                rec.deleted_at = Some(format_rfc3339(now));
            }
        }
    }

    /// The report at `end`.
    pub fn finish(
        mut self,
        end: Timestamp,
        lower_bound: Option<f64>,
        unschedulable: BTreeMap<String, String>,
        cloud_calls: usize,
        gap: Gap,
        usage: &BTreeMap<String, PoolUsage>,
    ) -> Report {
        // A pod is pending from its creation until it is bound, deleted,
        // or the run ends.
        for p in self.pods.values_mut() {
            let until = p.bound.or(p.deleted).unwrap_or(end);
            p.pending_seconds = p.created.map(|c| secs(c, until)).unwrap_or(0.0);
        }
        // Every pod still pending at the end is listed, with the last
        // solve's reason or as waiting for the capacity planned for it.
        let mut unschedulable = unschedulable;
        let mut still_pending = 0;
        for (key, p) in &self.pods {
            if p.bound.is_none() && p.deleted.is_none() && !terminal(&p.phase) {
                still_pending += 1;
                unschedulable
                    .entry(key.clone())
                    .or_insert_with(|| WAITING_FOR_CAPACITY.to_string());
            }
        }
        unschedulable.retain(|key, _| {
            self.pods
                .get(key)
                .is_none_or(|p| p.bound.is_none() && p.deleted.is_none() && !terminal(&p.phase))
        });
        let mut pods_by_node: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (key, p) in &self.pods {
            if let Some(n) = &p.node {
                pods_by_node
                    .entry(n.as_str())
                    .or_default()
                    .push(key.clone());
            }
        }
        let mut cost = 0.0;
        let mut fleet = 0.0;
        let mut disruptions: BTreeMap<String, usize> = BTreeMap::new();
        let mut terminated = 0;
        let mut pools: BTreeMap<String, PoolSummary> = BTreeMap::new();
        for n in self.nodes.values_mut() {
            n.pods = pods_by_node
                .get(n.name.as_str())
                .cloned()
                .unwrap_or_default();
            let node_cost = n.cost(end);
            cost += node_cost;
            let pool = pools
                .entry(n.nodepool.clone())
                .or_insert_with(|| PoolSummary {
                    nodepool: n.nodepool.clone(),
                    nodes_launched: 0,
                    nodes: 0,
                    cost_usd: 0.0,
                    price_per_hour: 0.0,
                    cpu_utilization: 0.0,
                    memory_utilization: 0.0,
                });
            pool.nodes_launched += 1;
            pool.cost_usd += node_cost;
            if n.deleted.is_some() {
                terminated += 1;
            } else {
                fleet += n.price_per_hour;
                pool.nodes += 1;
                pool.price_per_hour += n.price_per_hour;
            }
            if let Some(r) = &n.disruption_reason {
                *disruptions.entry(r.clone()).or_default() += 1;
            }
        }
        let mut pending: Vec<f64> = self
            .pods
            .values()
            .filter(|p| !p.daemon)
            .map(|p| p.pending_seconds)
            .collect();
        pending.sort_by(f64::total_cmp);
        let pct = |q: f64| -> f64 {
            if pending.is_empty() {
                return 0.0;
            }
            let i = ((pending.len() as f64 - 1.0) * q).round() as usize;
            pending[i.min(pending.len() - 1)]
        };
        let round = round6;
        let share = |u: &PoolUsage, key: &str| {
            let total = u.allocatable.get(key);
            if total <= 0 {
                return 0.0;
            }
            ((u.requested.get(key) as f64 / total as f64) * 1e4).round() / 1e4
        };
        let nodepools = pools
            .into_values()
            .map(|mut p| {
                p.cost_usd = round(p.cost_usd);
                p.price_per_hour = round(p.price_per_hour);
                if let Some(u) = usage.get(&p.nodepool) {
                    p.cpu_utilization = share(u, crate::model::quantity::CPU);
                    p.memory_utilization = share(u, crate::model::quantity::MEMORY);
                }
                p
            })
            .collect();
        let duration = secs(self.start, end);
        let rel = |t: Option<Timestamp>| t.map(|t| t.duration_since(self.start).as_secs_f64());
        let node_spans: Vec<(&str, f64, Option<f64>, f64)> = self
            .nodes
            .values()
            .map(|n| {
                (
                    n.nodepool.as_str(),
                    rel(n.launched).unwrap_or(0.0),
                    rel(n.deleted),
                    n.price_per_hour,
                )
            })
            .collect();
        let pending_spans: Vec<(f64, Option<f64>)> = self
            .pods
            .values()
            .filter(|p| !p.daemon)
            .filter_map(|p| Some((rel(p.created)?, rel(p.bound.or(p.deleted)))))
            .collect();
        let series = Series::build(duration, &node_spans, &pending_spans, &self.fleet);
        let summary = Summary {
            duration_seconds: duration,
            cost_usd: round(cost),
            nodes_launched: self.nodes.len(),
            nodes_terminated: terminated,
            disruptions_by_reason: disruptions,
            evictions: self.evictions,
            pods_created: self.pods.len(),
            pods_pending: still_pending,
            max_pending_seconds: pending.last().copied().unwrap_or(0.0),
            p50_pending_seconds: pct(0.5),
            p99_pending_seconds: pct(0.99),
            price_per_hour: round(fleet),
            lower_bound_price_per_hour: lower_bound.map(round),
            cloud_calls,
            gap,
            nodepools,
        };
        Report {
            schema_version: 1,
            start: format_rfc3339(self.start),
            end: format_rfc3339(end),
            nodes: self.nodes.into_values().collect(),
            pods: self.pods.into_values().collect(),
            events: self.events,
            disruptions: self.decisions,
            fleet: self.fleet,
            series,
            unschedulable: unschedulable
                .into_iter()
                .map(|(pod, reason)| Unschedulable { pod, reason })
                .collect(),
            blocked: Vec::new(),
            summary,
            interruption_handling: Vec::new(),
            interruption_metrics: None,
            metrics: None,
        }
    }
}

/// The pods still pending at the end, in `unschedulable[]`'s order, grouped
/// by workload (pods of none alone) and reason: `(workload, reason, pods)`.
pub type PendingGroup<'a> = (Option<&'a str>, &'a str, Vec<&'a str>);

impl Report {
    /// Each pod's workload (`Deployment/namespace/name`), by
    /// `namespace/name`.
    pub fn workloads(&self) -> std::collections::HashMap<String, &str> {
        self.pods
            .iter()
            .filter_map(|p| {
                Some((
                    format!("{}/{}", p.namespace, p.name),
                    p.workload.as_deref()?,
                ))
            })
            .collect()
    }

    /// [`PendingGroup`]s of `unschedulable[]`, with `workloads` from
    /// [`Report::workloads`].
    pub fn pending_groups<'a>(
        &'a self,
        workloads: &std::collections::HashMap<String, &'a str>,
    ) -> Vec<PendingGroup<'a>> {
        let mut groups: Vec<PendingGroup<'a>> = Vec::new();
        let mut index: std::collections::HashMap<(Option<&str>, &str), usize> =
            std::collections::HashMap::new();
        for u in &self.unschedulable {
            let w = workloads.get(&u.pod).copied();
            let i = *index.entry((w, u.reason.as_str())).or_insert_with(|| {
                groups.push((w, u.reason.as_str(), Vec::new()));
                groups.len() - 1
            });
            groups[i].2.push(u.pod.as_str());
        }
        groups
    }
}

/// `+1h02m03s`: an offset from the start for the timeline.
pub(crate) fn offset(t: f64) -> String {
    let s = t.round() as u64;
    format!("+{}h{:02}m{:02}s", s / 3600, (s % 3600) / 60, s % 60)
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report serialises")
    }

    /// A readable timeline and summary; at most `max_events` lines of
    /// events. Alike events at one time (the same reason and message for
    /// pods of one workload) are one line, as are the pods still pending
    /// for one reason; `color` paints headings and warnings (for a
    /// terminal).
    pub fn to_text(&self, max_events: usize, color: bool) -> String {
        let paint = |code: &str, text: &str| {
            if color {
                format!("\x1b[{code}m{text}\x1b[0m")
            } else {
                text.to_string()
            }
        };
        let workloads = self.workloads();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}",
            paint("1", &format!("Timeline (from {}):", self.start))
        );
        let lines = group_events(&self.events, &workloads);
        for l in lines.iter().take(max_events) {
            let e = l.first;
            let object = match &l.workload {
                Some(w) if l.count > 1 => format!("{} pods of {w}", thousands(l.count)),
                _ => e.object.clone(),
            };
            let reason = if is_warning(&e.reason) {
                paint("33", &e.reason)
            } else {
                paint("36", &e.reason)
            };
            let _ = write!(out, "  {}  {object:<40} {reason}", offset(e.t));
            if !e.message.is_empty() {
                let _ = write!(out, ": {}", e.message);
            }
            out.push('\n');
        }
        if lines.len() > max_events {
            let left: usize = lines[max_events..].iter().map(|l| l.count).sum();
            let _ = writeln!(
                out,
                "  ... {} more events (see --output json)",
                thousands(left)
            );
        }
        if !self.unschedulable.is_empty() {
            let _ = writeln!(out, "\n{}", paint("1;31", "Pods still pending at the end:"));
            // Pods of one workload pending for one reason are one line.
            for (workload, reason, pods) in self.pending_groups(&workloads) {
                match (workload, pods.as_slice()) {
                    (Some(w), [_, _, ..]) => {
                        let _ = writeln!(out, "  {} pods of {w}: {reason}", thousands(pods.len()));
                    }
                    _ => {
                        for p in pods {
                            let _ = writeln!(out, "  {p}: {reason}");
                        }
                    }
                }
            }
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "\n{}",
            paint(
                "1",
                &format!(
                    "Summary ({} simulated):",
                    offset(s.duration_seconds).trim_start_matches('+')
                )
            )
        );
        let _ = writeln!(out, "  nodes launched      {}", s.nodes_launched);
        let _ = writeln!(out, "  nodes terminated    {}", s.nodes_terminated);
        let _ = writeln!(out, "  pods created        {}", s.pods_created);
        if s.pods_pending > 0 {
            let _ = writeln!(
                out,
                "  pods still pending  {} (listed above with their reasons)",
                s.pods_pending
            );
        }
        let _ = writeln!(out, "  evictions           {}", s.evictions);
        let _ = writeln!(
            out,
            "  pending seconds     p50 {:.0}, p99 {:.0}, max {:.0}",
            s.p50_pending_seconds, s.p99_pending_seconds, s.max_pending_seconds
        );
        let _ = writeln!(out, "  cost                ${:.2}", s.cost_usd);
        match s.lower_bound_price_per_hour {
            Some(lb) if lb > 0.0 => {
                let _ = writeln!(
                    out,
                    "  final fleet         ${:.4}/h (lower bound ${:.4}/h, ratio {:.2})",
                    s.price_per_hour,
                    lb,
                    s.price_per_hour / lb
                );
                let g = &s.gap;
                let pct = |x: f64| (x * 100.0).round();
                let _ = writeln!(
                    out,
                    "  what the bound leaves out:\n    idle allocatable    {}% of cpu, {}% of memory (nodes come in whole instance types)\n    DaemonSet pods      {}% of cpu, {}% of memory (once per node)",
                    pct(g.idle_cpu_share),
                    pct(g.idle_memory_share),
                    pct(g.daemonset_cpu_share),
                    pct(g.daemonset_memory_share),
                );
                for z in &g.zone_spread {
                    let _ = writeln!(
                        out,
                        "    zone spread         {} over {} zones (a node in each)",
                        z.workload, z.zones
                    );
                }
            }
            _ => {
                let _ = writeln!(out, "  final fleet         ${:.4}/h", s.price_per_hour);
            }
        }
        if !s.nodepools.is_empty() {
            let _ = writeln!(
                out,
                "\n{}",
                paint(
                    "1",
                    "By NodePool (nodes at the end, launched; cpu and memory requested of allocatable at the end):"
                )
            );
            let _ = writeln!(
                out,
                "  {:<20} {:>7} {:>9} {:>11} {:>11} {:>5} {:>7}",
                "nodepool", "nodes", "launched", "cost", "final $/h", "cpu", "memory"
            );
            for p in &s.nodepools {
                let pct = |x: f64| format!("{:.0}%", x * 100.0);
                let _ = writeln!(
                    out,
                    "  {:<20} {:>7} {:>9} {:>11} {:>11} {:>5} {:>7}",
                    p.nodepool,
                    thousands(p.nodes),
                    thousands(p.nodes_launched),
                    format!("${:.2}", p.cost_usd),
                    format!("${:.4}", p.price_per_hour),
                    pct(p.cpu_utilization),
                    pct(p.memory_utilization),
                );
            }
        }
        out
    }
}

/// One line of the text timeline: an event, or alike events at one time.
struct Line<'a> {
    first: &'a ReportEvent,
    workload: Option<String>,
    count: usize,
}

/// Events at the same time with the same reason and message, for pods of
/// the same workload, become one line.
fn group_events<'a>(
    events: &'a [ReportEvent],
    workloads: &std::collections::HashMap<String, &str>,
) -> Vec<Line<'a>> {
    let mut lines: Vec<Line<'a>> = Vec::new();
    let mut at: std::collections::HashMap<(&str, &str, &str), usize> =
        std::collections::HashMap::new();
    let mut t = f64::NAN;
    for e in events {
        if e.t != t {
            t = e.t;
            at.clear();
        }
        let workload = e
            .object
            .strip_prefix("Pod/")
            .and_then(|pod| workloads.get(pod).copied());
        let Some(w) = workload else {
            lines.push(Line {
                first: e,
                workload: None,
                count: 1,
            });
            continue;
        };
        match at.entry((w, e.reason.as_str(), e.message.as_str())) {
            std::collections::hash_map::Entry::Occupied(i) => lines[*i.get()].count += 1,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(lines.len());
                lines.push(Line {
                    first: e,
                    workload: Some(w.to_string()),
                    count: 1,
                });
            }
        }
    }
    lines
}

/// Reasons the timeline shows as warnings.
fn is_warning(reason: &str) -> bool {
    reason.starts_with("Failed")
        || reason.ends_with("Failed")
        || [
            "Invalid",
            "Timeout",
            "NotFound",
            "Blocked",
            "Gone",
            "Interrupted",
            "Expiring",
        ]
        .iter()
        .any(|w| reason.contains(w))
}

/// The metrics of a run: the families at its end, and the snapshots over
/// it when asked for.
#[derive(Debug, Clone)]
pub struct RunMetrics {
    pub families: Vec<prometheus::proto::MetricFamily>,
    pub series: Option<crate::metrics::exposition::Series>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TestPod, pod};

    /// A pod of the Deployment `w` in `shop`.
    fn web(name: &str) -> TestPod {
        pod("shop", name).owned_by("Deployment", "w")
    }

    /// DaemonSet pods are bound as their node appears: counted, they would
    /// pull the pending percentiles of the pods that waited for capacity
    /// towards zero.
    #[test]
    fn daemonset_pods_are_not_in_the_pending_percentiles() {
        let t0 = Timestamp::UNIX_EPOCH;
        let t = |s: u64| t0.checked_add(std::time::Duration::from_secs(s)).unwrap();
        let mut r = Recorder::new(t0);
        r.upsert_pod(&web("web-1").build(), t0, false);
        r.upsert_pod(&web("web-2").build(), t(10), false);
        r.upsert_pod(&web("web-3").build(), t(20), false);
        for i in 0..5 {
            r.upsert_pod(
                &pod("shop", &format!("ds-{i}"))
                    .owned_by("DaemonSet", "w")
                    .on("n")
                    .build(),
                t(60),
                false,
            );
        }
        r.upsert_pod(&web("web-1").on("n").build(), t(60), false);
        let p = r.progress(t(60), t(120));
        assert_eq!((p.pods, p.pending, p.nodes), (8, 2, 0));
        r.upsert_pod(&web("web-2").on("n").build(), t(60), false);
        r.upsert_pod(&web("web-3").on("n").build(), t(60), false);
        let report = r.finish(
            t(120),
            None,
            BTreeMap::new(),
            0,
            Gap::default(),
            &BTreeMap::new(),
        );
        let s = &report.summary;
        assert_eq!(
            (
                s.p50_pending_seconds,
                s.p99_pending_seconds,
                s.max_pending_seconds
            ),
            (50.0, 60.0, 60.0)
        );
        assert_eq!(s.pods_created, 8);
    }

    /// A pod deleted gracefully is gone when its kubelet deletes it, not
    /// when it was evicted; after a relist (the watch log compacted) the
    /// pods no longer listed are gone as of then.
    #[test]
    fn deleted_at_is_when_a_pod_was_gone() {
        use crate::cluster::{DeleteParams, ObjectKey};
        use crate::world::MemoryCluster;
        let clock = std::sync::Arc::new(crate::clock::ManualClock::new(Timestamp::UNIX_EPOCH));
        let t = |s: u64| {
            Timestamp::UNIX_EPOCH
                .checked_add(std::time::Duration::from_secs(s))
                .unwrap()
        };
        let cluster = MemoryCluster::new(clock.clone()).with_watch_log_capacity(4);
        let mut r = Recorder::new(t(0));
        for name in ["a", "b"] {
            cluster.create(web(name).on("n").build()).unwrap();
        }
        r.observe(&cluster, &Arc::default(), t(0));
        cluster.delete::<Pod>(&ObjectKey::new("shop", "a")).unwrap();
        r.observe(&cluster, &Arc::default(), t(0));
        clock.set(t(30)).unwrap();
        cluster
            .delete_with::<Pod>(
                &ObjectKey::new("shop", "a"),
                &DeleteParams::with_grace_period(0),
            )
            .unwrap();
        r.observe(&cluster, &Arc::default(), t(30));
        assert_eq!(r.pods["shop/a"].deleted, Some(t(30)));

        // Enough changes to compact the log past what the recorder saw.
        for i in 0..6 {
            cluster.create(web(&format!("c{i}")).build()).unwrap();
        }
        cluster.delete::<Pod>(&ObjectKey::new("shop", "b")).unwrap();
        cluster
            .delete_with::<Pod>(
                &ObjectKey::new("shop", "b"),
                &DeleteParams::with_grace_period(0),
            )
            .unwrap();
        assert!(
            cluster.watch_from::<Pod>(r.pod_version).is_err(),
            "compacted: the recorder relists"
        );
        r.observe(&cluster, &Arc::default(), t(40));
        assert_eq!(r.pods["shop/b"].deleted, Some(t(40)));
        assert_eq!(r.pods["shop/a"].deleted, Some(t(30)));
        assert_eq!(r.pods["shop/c5"].deleted, None);
    }

    #[test]
    fn series_keep_the_peak_of_each_interval_on_one_time_axis() {
        // 100 s at 1 s steps; a node of pool a from 0 to 50 s at $1/h, one
        // of pool b for two seconds inside an interval, a pod pending from
        // 10.5 s to 12 s.
        let nodes = [("a", 0.0, Some(50.0), 1.0), ("b", 20.2, Some(20.4), 2.0)];
        let pending = [(10.5, Some(12.0)), (99.5, None)];
        let fleet = [
            FleetPoint {
                t: 0.0,
                nodes: 1,
                price_per_hour: 1.0,
                lower_bound_price_per_hour: Some(0.5),
            },
            FleetPoint {
                t: 60.0,
                nodes: 0,
                price_per_hour: 0.0,
                lower_bound_price_per_hour: None,
            },
        ];
        let s = Series::build(100.0, &nodes, &pending, &fleet);
        assert_eq!(s.step_seconds, 1.0);
        assert_eq!(s.t.len(), 101);
        assert_eq!((s.t[0], s.t[100]), (0.0, 100.0));
        assert_eq!(s.nodes["a"][0], 1);
        assert_eq!(s.nodes["a"][50], 1, "the interval (49, 50] had it");
        assert_eq!(s.nodes["a"][51], 0);
        assert_eq!(s.nodes["b"][21], 1, "a node of 0.2 s shows in its interval");
        assert_eq!(s.nodes["b"][22], 0);
        assert_eq!(s.price_per_hour[21], 3.0);
        assert_eq!(s.pending_pods[10], 0);
        assert_eq!(s.pending_pods[11], 1);
        assert_eq!(s.pending_pods[12], 1);
        assert_eq!(s.pending_pods[13], 0);
        assert_eq!(s.pending_pods[100], 1, "still pending at the end");
        assert_eq!(s.lower_bound_price_per_hour[59], Some(0.5));
        assert_eq!(s.lower_bound_price_per_hour[60], None);
        // A day: two-minute steps, never more than SERIES_POINTS intervals.
        let day = Series::build(86_400.0, &nodes, &pending, &fleet);
        assert_eq!(day.step_seconds, 120.0);
        assert_eq!(day.t.len(), SERIES_POINTS + 1);
        // Changes at one time apply together: a replacement at the moment
        // its predecessor goes is no peak of two.
        let swap = [("a", 0.0, Some(30.0), 1.0), ("a", 30.0, None, 1.0)];
        let s = Series::build(60.0, &swap, &[], &[]);
        assert!(s.nodes["a"].iter().all(|n| *n == 1), "{:?}", s.nodes["a"]);
    }

    /// The page stays under 5 MB at any scale: 42,000 pods pending in
    /// 2,000 workloads, each group with a long reason, and more decisions
    /// than the page lists, each with 40 NodeClaims and replacements.
    #[test]
    fn the_html_of_a_huge_run_stays_under_5_mb() {
        let t0 = Timestamp::UNIX_EPOCH;
        let t = |s: u64| t0.checked_add(std::time::Duration::from_secs(s)).unwrap();
        let mut r = Recorder::new(t0);
        let mut unschedulable = BTreeMap::new();
        for w in 0..2_000 {
            for i in 0..21 {
                let v = serde_json::json!({
                    "metadata": {"name": format!("batch-job-number-{w:04}-pod-{i:02}-abcde"), "namespace": "analytics-team", "ownerReferences": [
                        {"apiVersion": "batch/v1", "kind": "Job", "name": format!("batch-job-number-{w:04}"), "uid": "u", "controller": true}
                    ]},
                    "spec": {"containers": []},
                });
                let p: Pod = serde_json::from_value(v).unwrap();
                r.upsert_pod(&p, t(60), false);
                unschedulable.insert(
                    format!("analytics-team/batch-job-number-{w:04}-pod-{i:02}-abcde"),
                    format!("no instance type in NodePool general has nvidia.com/gpu=8 with requirement {w} {}", "x".repeat(150)),
                );
            }
        }
        let names = |prefix: &str| {
            (0..40)
                .map(|i| format!("{prefix}-nodeclaim-{i:05}"))
                .collect::<Vec<_>>()
        };
        r.decisions(
            (0..3_000)
                .map(|i| Decision {
                    t: t(i * 20),
                    reason: "Underutilized".into(),
                    decision: "replace".into(),
                    consolidation_type: "multi".into(),
                    nodeclaims: names("general"),
                    replacements: names("replacement"),
                    replacement_types: vec![vec!["m7i-flex.48xlarge".to_string()]; 40],
                    savings_per_hour: 12.345678,
                })
                .collect(),
        );
        let report = r.finish(
            t(86_400),
            Some(100.0),
            unschedulable,
            0,
            Gap::default(),
            &BTreeMap::new(),
        );
        let html = super::super::html::render(&report);
        assert!(html.len() < 5_000_000, "{} bytes", html.len());
        assert!(html.contains("The first 2,000 decisions are shown; the 1,000 others"));
        assert!(html.contains("1,000 more groups are in"));
        assert!(
            html.contains("<td class=\"num\">21</td>"),
            "groups count their pods"
        );
        println!("the worst case's page: {} bytes", html.len());
    }

    #[test]
    fn progress_says_the_simulated_time_pods_and_nodes() {
        let p = Progress {
            simulated: std::time::Duration::from_secs(3 * 3600 + 12 * 60),
            until: std::time::Duration::from_secs(24 * 3600),
            pods: 12_345,
            pending: 120,
            nodes: 300,
        };
        assert_eq!(
            p.to_string(),
            "simulate: 3h12m00s of 24h00m00s simulated, 12,345 pods (120 pending), 300 nodes"
        );
    }
}
