//! The impact of a configuration change on running capacity: which nodes
//! would drift and why, whether the new limits are already exceeded, how
//! disruption budgets pace the replacement, and what the affected nodes
//! cost.
//!
//! The old side is the configuration the nodes were launched under (a
//! commit, or the live objects); the new side is what replaces it. A
//! NodeClaim stamped with a drift hash of the current version is compared
//! with the new hash itself; an unstamped one is taken to match the old
//! side, as the controller would stamp it before the change lands.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use serde_json::Value;

use super::Change;
use super::normalise::normalise;
use crate::api::{ApiKind, EC2NodeClass, NodeClaim, NodePool};
use crate::drift::budget::{self, Pacing};
use crate::drift::hash::{self, ami_selection, changed_fields};
use crate::drift::{
    DriftReason, NodeView, RequirementsError, nodepool_requirements, requirements_conflict,
};
use crate::model::InstanceType;
use crate::model::labels::{CAPACITY_TYPE, INSTANCE_TYPE, ZONE, normalize_labels};
use crate::model::quantity::{format_quantity, parse_quantity};
use crate::model::resources::Resources;

/// A rough time to replace one node: launch and register a replacement
/// (about 1–2 minutes on EC2), then drain the old node (pods' grace periods,
/// PDBs). The CLI's `--replacement-time` overrides it.
pub const DEFAULT_REPLACEMENT_TIME: Duration = Duration::from_secs(5 * 60);

/// The NodePools and EC2NodeClasses of one side, by name.
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub nodepools: BTreeMap<String, NodePool>,
    pub ec2nodeclasses: BTreeMap<String, EC2NodeClass>,
}

impl Config {
    /// Adds an object of `kind` given as JSON (NodeClaims, NodeOverlays and
    /// CapacityBuffers, which drift nothing, are ignored). The
    /// error says why it does not deserialise.
    pub fn insert_value(&mut self, kind: ApiKind, value: &Value) -> Result<(), String> {
        let display = crate::diag::kind_name(value);
        let fail = |e: serde_json::Error| format!("{display}: {e}");
        match kind {
            ApiKind::NodePool => {
                let pool: NodePool = serde_json::from_value(value.clone()).map_err(fail)?;
                let name = pool.metadata.name.clone().unwrap_or_default();
                self.nodepools.insert(name, pool);
            }
            ApiKind::EC2NodeClass => {
                let class: EC2NodeClass = serde_json::from_value(value.clone()).map_err(fail)?;
                let name = class.metadata.name.clone().unwrap_or_default();
                self.ec2nodeclasses.insert(name, class);
            }
            ApiKind::NodeClaim | ApiKind::NodeOverlay | ApiKind::CapacityBuffer => {}
        }
        Ok(())
    }
}

/// The node set: each Node with its NodeClaim (matched by `status.nodeName`
/// or provider ID), then NodeClaims without a Node yet (not deleting).
pub fn node_views<'n>(
    nodes: impl IntoIterator<Item = &'n Node>,
    claims: &[NodeClaim],
) -> Result<Vec<NodeView>, String> {
    let mut used = vec![false; claims.len()];
    // Claims by node name and by provider ID; the first claim wins a tie.
    let mut by_node: HashMap<&str, usize> = HashMap::new();
    let mut by_provider: HashMap<&str, usize> = HashMap::new();
    for (i, c) in claims.iter().enumerate().rev() {
        if let Some(status) = c.status.as_ref() {
            if let Some(n) = status.node_name.as_deref() {
                by_node.insert(n, i);
            }
            if let Some(p) = status.provider_id.as_deref() {
                by_provider.insert(p, i);
            }
        }
    }
    let mut out = Vec::new();
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        let claim = [
            by_node.get(name.as_str()),
            provider_id.and_then(|p| by_provider.get(p)),
        ]
        .into_iter()
        .flatten()
        .min()
        .copied();
        let mut view = match claim {
            Some(i) => {
                used[i] = true;
                NodeView::from_nodeclaim(&claims[i])
            }
            None => NodeView::default(),
        };
        view.name.clone_from(&name);
        view.labels.extend(normalize_labels(
            &node.metadata.labels.clone().unwrap_or_default(),
        ));
        if let Some(capacity) = node.status.as_ref().and_then(|s| s.capacity.as_ref()) {
            view.capacity = Resources::from_k8s(capacity)
                .map_err(|(k, e)| format!("Node/{name}: status.capacity.{k}: {e}"))?;
        }
        out.push(view);
    }
    for (claim, _) in claims.iter().zip(used).filter(|(_, used)| !used) {
        if claim.metadata.deletion_timestamp.is_none() {
            out.push(NodeView::from_nodeclaim(claim));
        }
    }
    Ok(out)
}

/// A node the change affects.
#[derive(Debug, Clone, PartialEq)]
pub struct AffectedNode {
    pub name: String,
    pub nodeclaim: Option<String>,
    pub instance_type: Option<String>,
    pub reasons: Vec<DriftReason>,
    /// USD/h of its offering, with a catalog.
    pub price_per_hour: Option<f64>,
}

impl AffectedNode {
    /// Whether it certainly drifts (some reason does not depend on how an
    /// AMI selection resolves).
    pub fn is_certain(&self) -> bool {
        self.reasons.iter().any(DriftReason::is_certain)
    }
}

/// A limit of a NodePool against the capacity of its nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitUsage {
    pub resource: String,
    /// As written in `spec.limits`.
    pub limit: String,
    /// The sum over the NodePool's nodes (`nodes`: their number).
    pub used: String,
    pub exceeded: bool,
}

/// The impact on one NodePool.
#[derive(Debug, Clone, PartialEq)]
pub struct NodePoolImpact {
    pub name: String,
    pub change: Change,
    /// Its nodes now.
    pub nodes: usize,
    /// Nodes that would drift (or be drained, when the NodePool is deleted).
    pub affected: Vec<AffectedNode>,
    /// The new limits against current usage.
    pub limits: Vec<LimitUsage>,
    /// How budgets pace replacement; `None` when the NodePool is deleted.
    pub pacing: Option<Pacing>,
    pub price_per_hour: Option<f64>,
    /// Affected nodes the catalog has no price for.
    pub unpriced: usize,
}

impl NodePoolImpact {
    /// Whether any new limit is already exceeded.
    pub fn limits_exceeded(&self) -> bool {
        self.limits.iter().any(|l| l.exceeded)
    }
}

/// The impact on one EC2NodeClass.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClassImpact {
    pub name: String,
    pub change: Change,
    pub nodes: usize,
    /// Nodes that drift because of this EC2NodeClass (all its nodes, with
    /// their reasons, when it is deleted).
    pub affected: Vec<AffectedNode>,
    pub price_per_hour: Option<f64>,
    pub unpriced: usize,
}

/// What a change does to running capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct ImpactReport {
    pub nodepools: Vec<NodePoolImpact>,
    pub ec2nodeclasses: Vec<NodeClassImpact>,
    /// Nodes in the node set.
    pub nodes: usize,
    /// The per-wave replacement time the estimates use.
    pub replacement_time: Duration,
    /// Whether prices were looked up in a catalog.
    pub priced: bool,
}

impl ImpactReport {
    /// Every affected node (of any NodePool), sorted by name.
    pub fn affected_nodes(&self) -> Vec<&AffectedNode> {
        let mut all: Vec<&AffectedNode> = self.nodepools.iter().flat_map(|p| &p.affected).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }
}

/// What [`build`] needs.
#[derive(Debug, Clone, Copy)]
pub struct ImpactInput<'a> {
    pub old: &'a Config,
    pub new: &'a Config,
    pub nodes: &'a [NodeView],
    /// Prices the affected nodes when given.
    pub catalog: Option<&'a [InstanceType]>,
    /// How long one wave of replacements takes.
    pub replacement_time: Duration,
}

/// Builds the impact report.
pub fn build(input: &ImpactInput) -> Result<ImpactReport, RequirementsError> {
    let (old, new) = (input.old, input.new);
    let mut per_node: Vec<Vec<DriftReason>> = vec![Vec::new(); input.nodes.len()];
    for (view, reasons) in input.nodes.iter().zip(per_node.iter_mut()) {
        let Some(pool) = view.nodepool() else {
            continue;
        };
        *reasons = node_reasons(
            view,
            old.nodepools.get(pool),
            new.nodepools.get(pool),
            old,
            new,
        )?;
    }
    let affected = |i: usize, keep: &dyn Fn(&DriftReason) -> bool| {
        let view = &input.nodes[i];
        let reasons: Vec<DriftReason> = per_node[i].iter().filter(|r| keep(r)).cloned().collect();
        (!reasons.is_empty()).then(|| AffectedNode {
            name: view.name.clone(),
            nodeclaim: view.nodeclaim.clone(),
            instance_type: view.labels.get(INSTANCE_TYPE).cloned(),
            reasons,
            price_per_hour: input.catalog.and_then(|c| price(view, c)),
        })
    };

    let mut nodepools = Vec::new();
    for name in union(old.nodepools.keys(), new.nodepools.keys()) {
        let (o, n) = (old.nodepools.get(name), new.nodepools.get(name));
        let members: Vec<usize> = (0..input.nodes.len())
            .filter(|&i| input.nodes[i].nodepool() == Some(name))
            .collect();
        let affected: Vec<AffectedNode> = members
            .iter()
            .filter_map(|&i| affected(i, &|_| true))
            .collect();
        let (price_per_hour, unpriced) = total_price(&affected, input.catalog.is_some());
        nodepools.push(NodePoolImpact {
            name: name.clone(),
            change: change(ApiKind::NodePool, o, n),
            nodes: members.len(),
            limits: n.map_or_else(Vec::new, |n| {
                limits(n, members.iter().map(|&i| &input.nodes[i]))
            }),
            pacing: n
                .map(|n| budget::pacing(n, members.len(), affected.len(), input.replacement_time)),
            affected,
            price_per_hour,
            unpriced,
        });
    }

    let mut ec2nodeclasses = Vec::new();
    for name in union(old.ec2nodeclasses.keys(), new.ec2nodeclasses.keys()) {
        let (o, n) = (old.ec2nodeclasses.get(name), new.ec2nodeclasses.get(name));
        let members: Vec<usize> = (0..input.nodes.len())
            .filter(|&i| nodeclass_of(&input.nodes[i], old, new) == Some(name.as_str()))
            .collect();
        let deleted = n.is_none();
        let affected: Vec<AffectedNode> = members
            .iter()
            .filter_map(|&i| affected(i, &|r| deleted || r.is_nodeclass()))
            .collect();
        let (price_per_hour, unpriced) = total_price(&affected, input.catalog.is_some());
        ec2nodeclasses.push(NodeClassImpact {
            name: name.clone(),
            change: change(ApiKind::EC2NodeClass, o, n),
            nodes: members.len(),
            affected,
            price_per_hour,
            unpriced,
        });
    }
    Ok(ImpactReport {
        nodepools,
        ec2nodeclasses,
        nodes: input.nodes.len(),
        replacement_time: input.replacement_time,
        priced: input.catalog.is_some(),
    })
}

fn union<'a>(
    a: impl Iterator<Item = &'a String>,
    b: impl Iterator<Item = &'a String>,
) -> Vec<&'a String> {
    let mut names: Vec<&String> = a.chain(b).collect();
    names.sort();
    names.dedup();
    names
}

/// The EC2NodeClass of a node: its own record, else its NodePool's
/// reference (new side first).
fn nodeclass_of<'a>(view: &'a NodeView, old: &'a Config, new: &'a Config) -> Option<&'a str> {
    view.nodeclass().or_else(|| {
        let pool = view.nodepool()?;
        new.nodepools
            .get(pool)
            .or_else(|| old.nodepools.get(pool))
            .map(|p| p.spec.template.spec.node_class_ref.name.as_str())
    })
}

fn change<T: serde::Serialize>(kind: ApiKind, old: Option<&T>, new: Option<&T>) -> Change {
    match (old, new) {
        (None, _) => Change::Created,
        (_, None) => Change::Deleted,
        (Some(o), Some(n)) => {
            let value = |x: &T| normalise(kind, &serde_json::to_value(x).unwrap_or(Value::Null));
            if value(o) == value(n) {
                Change::Unchanged
            } else {
                Change::Changed
            }
        }
    }
}

/// Why one node of NodePool `old`/`new` drifts.
fn node_reasons(
    view: &NodeView,
    old_pool: Option<&NodePool>,
    new_pool: Option<&NodePool>,
    old: &Config,
    new: &Config,
) -> Result<Vec<DriftReason>, RequirementsError> {
    let mut reasons = Vec::new();
    let Some(new_pool) = new_pool else {
        if old_pool.is_some() {
            reasons.push(DriftReason::NodePoolDeleted);
        }
        return Ok(reasons);
    };
    let new_fields = hash::nodepool_fields(new_pool);
    let fields = || {
        old_pool.map_or_else(Vec::new, |o| {
            changed_fields(&hash::nodepool_fields(o), &new_fields)
        })
    };
    let template_drifts = match view.stamped_nodepool_hash() {
        Some(stamped) => stamped != hash::nodepool_hash(new_pool),
        None => old_pool.is_some_and(|o| hash::nodepool_hash(o) != hash::nodepool_hash(new_pool)),
    };
    if template_drifts {
        reasons.push(DriftReason::NodePoolTemplate { fields: fields() });
    }
    if let Some(conflict) = requirements_conflict(&nodepool_requirements(new_pool)?, &view.labels) {
        reasons.push(DriftReason::Requirements { conflict });
    }
    let class_name = view
        .nodeclass()
        .unwrap_or(&new_pool.spec.template.spec.node_class_ref.name);
    let (Some(new_class), old_class) = (
        new.ec2nodeclasses.get(class_name),
        old.ec2nodeclasses.get(class_name),
    ) else {
        return Ok(reasons);
    };
    let class_drifts = match view.stamped_ec2nodeclass_hash() {
        Some(stamped) => stamped != hash::ec2nodeclass_hash(new_class),
        None => old_class
            .is_some_and(|o| hash::ec2nodeclass_hash(o) != hash::ec2nodeclass_hash(new_class)),
    };
    if class_drifts {
        reasons.push(DriftReason::EC2NodeClass {
            fields: old_class.map_or_else(Vec::new, |o| {
                changed_fields(
                    &hash::ec2nodeclass_fields(o),
                    &hash::ec2nodeclass_fields(new_class),
                )
            }),
        });
    }
    if let Some(old_class) = old_class
        && ami_selection(old_class) != ami_selection(new_class)
    {
        reasons.push(DriftReason::AmiSelection {
            old: describe_ami_terms(old_class),
            new: describe_ami_terms(new_class),
        });
    }
    Ok(reasons)
}

/// `alias al2023@latest`, `id ami-0123`, or the term as JSON.
fn describe_ami_terms(class: &EC2NodeClass) -> String {
    let terms: Vec<String> = class
        .spec
        .ami_selector_terms
        .iter()
        .map(|t| match (&t.alias, &t.id) {
            (Some(alias), _) => format!("alias {alias}"),
            (None, Some(id)) => format!("id {id}"),
            _ => serde_json::to_value(t)
                .ok()
                .and_then(|v| hash::canonical(&v))
                .map_or_else(|| "{}".to_string(), |v| v.to_string()),
        })
        .collect();
    if terms.is_empty() {
        "no terms".to_string()
    } else {
        terms.join(", ")
    }
}

/// The new limits of `pool` against the capacity of its nodes.
fn limits<'a>(pool: &NodePool, nodes: impl Iterator<Item = &'a NodeView>) -> Vec<LimitUsage> {
    let Some(limits) = &pool.spec.limits else {
        return Vec::new();
    };
    let mut used = Resources::new();
    let mut count: i64 = 0;
    for n in nodes {
        used.add(&n.capacity);
        count += 1;
    }
    used.set("nodes", count);
    limits
        .iter()
        .map(|(resource, limit)| {
            let have = used.get(resource);
            LimitUsage {
                resource: resource.clone(),
                limit: limit.0.clone(),
                used: format_quantity(resource, have),
                // A limit that does not parse (the schema rejects it) is
                // not reported as exceeded.
                exceeded: parse_quantity(resource, &limit.0).is_ok_and(|l| have > l),
            }
        })
        .collect()
}

/// The price of a node's offering: its instance type, zone and capacity
/// type labels looked up in the catalog.
pub fn price(view: &NodeView, catalog: &[InstanceType]) -> Option<f64> {
    let (it, zone, capacity_type) = (
        view.labels.get(INSTANCE_TYPE)?,
        view.labels.get(ZONE)?,
        view.labels.get(CAPACITY_TYPE)?,
    );
    catalog
        .iter()
        .find(|t| &t.name == it)?
        .offerings
        .iter()
        .find(|o| &o.zone == zone && &o.capacity_type == capacity_type)
        .map(|o| o.price)
}

/// The summed price of the priced nodes and how many have no price.
fn total_price(nodes: &[AffectedNode], priced: bool) -> (Option<f64>, usize) {
    if !priced {
        return (None, 0);
    }
    let total = nodes.iter().filter_map(|n| n.price_per_hour).sum();
    let unpriced = nodes.iter().filter(|n| n.price_per_hour.is_none()).count();
    (Some(total), unpriced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeSelectorRequirementWithMinValues as Req;
    use crate::api::{Operator, Taint, TaintEffect};
    use crate::drift::stamp_annotations;
    use crate::model::Offering;
    use serde_json::json;

    fn config(pools: &[NodePool], classes: &[EC2NodeClass]) -> Config {
        Config {
            nodepools: pools
                .iter()
                .map(|p| (p.metadata.name.clone().unwrap(), p.clone()))
                .collect(),
            ec2nodeclasses: classes
                .iter()
                .map(|c| (c.metadata.name.clone().unwrap(), c.clone()))
                .collect(),
        }
    }

    fn view(name: &str, pool: &str, capacity: &str, cpu: &str) -> NodeView {
        NodeView {
            name: name.into(),
            nodeclaim: Some(format!("{name}-claim")),
            labels: [
                ("karpenter.sh/nodepool", pool),
                ("karpenter.sh/capacity-type", capacity),
                ("node.kubernetes.io/instance-type", "m7i.xlarge"),
                ("topology.kubernetes.io/zone", "us-east-1a"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            nodeclass: Some("default".into()),
            capacity: Resources::parse([("cpu", cpu)]).unwrap(),
            ..NodeView::default()
        }
    }

    fn run(
        old: &Config,
        new: &Config,
        nodes: &[NodeView],
        catalog: Option<&[InstanceType]>,
    ) -> ImpactReport {
        build(&ImpactInput {
            old,
            new,
            nodes,
            catalog,
            replacement_time: DEFAULT_REPLACEMENT_TIME,
        })
        .unwrap()
    }

    fn names(nodes: &[AffectedNode]) -> Vec<&str> {
        nodes.iter().map(|n| n.name.as_str()).collect()
    }

    #[test]
    fn a_requirement_change_drifts_only_the_nodes_it_excludes() {
        let class = EC2NodeClass::test("default");
        let pool = NodePool::test("general").with_limits(&[("cpu", "8")]);
        let mut spot_ok = pool.clone();
        spot_ok.spec.template.spec.requirements = vec![Req::new(
            "karpenter.sh/capacity-type",
            Operator::In,
            &["spot"],
        )];
        let nodes = [
            view("a", "general", "on-demand", "4"),
            view("b", "general", "spot", "4"),
            view("c", "general", "on-demand", "4"),
            view("other", "gpu", "on-demand", "4"),
        ];
        let report = run(
            &config(&[pool], std::slice::from_ref(&class)),
            &config(&[spot_ok], &[class]),
            &nodes,
            None,
        );
        let general = &report.nodepools[0];
        assert_eq!(general.change, Change::Changed);
        assert_eq!(general.nodes, 3);
        assert_eq!(names(&general.affected), ["a", "c"]);
        assert_eq!(general.affected[0].reasons[0].code(), "requirements");
        // Requirements are not part of any hash.
        assert!(report.ec2nodeclasses[0].affected.is_empty());
        // 12 CPUs against a limit of 8.
        assert_eq!(
            general.limits,
            [LimitUsage {
                resource: "cpu".into(),
                limit: "8".into(),
                used: "12".into(),
                exceeded: true
            }]
        );
        let pacing = general.pacing.as_ref().unwrap();
        assert_eq!((pacing.parallel, pacing.waves), (1, 2));
        assert_eq!(pacing.estimated, Some(DEFAULT_REPLACEMENT_TIME * 2));
    }

    #[test]
    fn stamped_nodes_compare_their_stamp_and_unstamped_ones_the_old_side() {
        let class = EC2NodeClass::test("default");
        let pool = NodePool::test("general");
        let mut tainted = pool.clone();
        tainted.spec.template.spec.taints = Some(vec![Taint::new(
            "dedicated",
            Some("x"),
            TaintEffect::NoSchedule,
        )]);
        // `fresh` was launched under the tainted template already (say by a
        // sync that got ahead of the base branch); `old` under the base.
        let mut fresh = view("fresh", "general", "on-demand", "4");
        fresh.annotations = stamp_annotations(&tainted, &class);
        let mut stale = view("stale", "general", "on-demand", "4");
        stale.annotations = stamp_annotations(&pool, &class);
        let unstamped = view("unstamped", "general", "on-demand", "4");
        let report = run(
            &config(&[pool], std::slice::from_ref(&class)),
            &config(&[tainted], &[class]),
            &[fresh, stale, unstamped],
            None,
        );
        let general = &report.nodepools[0];
        assert_eq!(names(&general.affected), ["stale", "unstamped"]);
        assert_eq!(
            general.affected[1].reasons,
            [DriftReason::NodePoolTemplate {
                fields: vec!["spec.taints".into()]
            }]
        );
    }

    #[test]
    fn an_ami_alias_change_affects_the_nodeclass_nodes_conditionally() {
        let class = EC2NodeClass::test("default");
        let mut pinned = class.clone();
        pinned.spec.ami_selector_terms[0].alias = Some("al2023@v20260101".into());
        let pool = NodePool::test("general");
        let nodes = [
            view("a", "general", "on-demand", "4"),
            view("b", "general", "on-demand", "4"),
        ];
        let report = run(
            &config(std::slice::from_ref(&pool), &[class]),
            &config(&[pool], &[pinned]),
            &nodes,
            None,
        );
        let class = &report.ec2nodeclasses[0];
        assert_eq!(class.change, Change::Changed);
        assert_eq!(names(&class.affected), ["a", "b"]);
        assert_eq!(
            class.affected[0].reasons,
            [DriftReason::AmiSelection {
                old: "alias al2023@latest".into(),
                new: "alias al2023@v20260101".into()
            }]
        );
        assert!(!class.affected[0].is_certain());
        assert!(
            class.affected[0].reasons[0]
                .to_string()
                .contains("drifts when the new selection resolves to a different image")
        );
    }

    #[test]
    fn nothing_changes_nothing_and_a_deleted_pool_drains() {
        let class = EC2NodeClass::test("default");
        let pool = NodePool::test("general");
        let nodes = [view("a", "general", "on-demand", "4")];
        let same = config(std::slice::from_ref(&pool), std::slice::from_ref(&class));
        let report = run(&same, &same, &nodes, None);
        assert!(report.affected_nodes().is_empty());
        assert_eq!(report.nodepools[0].change, Change::Unchanged);
        let report = run(&same, &config(&[], &[class]), &nodes, None);
        let general = &report.nodepools[0];
        assert_eq!(general.change, Change::Deleted);
        assert_eq!(general.affected[0].reasons, [DriftReason::NodePoolDeleted]);
        assert_eq!(general.pacing, None);
    }

    #[test]
    fn affected_nodes_are_priced_from_the_catalog() {
        let class = EC2NodeClass::test("default");
        let pool = NodePool::test("general");
        let mut tainted = pool.clone();
        tainted.spec.template.spec.startup_taints =
            Some(vec![Taint::new("init", None, TaintEffect::NoSchedule)]);
        let catalog = vec![InstanceType {
            name: "m7i.xlarge".into(),
            requirements: Default::default(),
            capacity: Resources::new(),
            overhead: Default::default(),
            allocatable: Resources::new(),
            offerings: vec![Offering {
                zone: "us-east-1a".into(),
                capacity_type: "on-demand".into(),
                price: 0.2016,
                available: true,
                reservations: Vec::new(),
            }],
        }];
        let nodes = [
            view("a", "general", "on-demand", "4"),
            view("b", "general", "spot", "4"),
        ];
        let report = run(
            &config(&[pool], std::slice::from_ref(&class)),
            &config(&[tainted], &[class]),
            &nodes,
            Some(&catalog),
        );
        let general = &report.nodepools[0];
        assert_eq!(general.affected[0].price_per_hour, Some(0.2016));
        assert_eq!(general.affected[1].price_per_hour, None);
        assert_eq!(
            (general.price_per_hour, general.unpriced),
            (Some(0.2016), 1)
        );
    }

    #[test]
    fn node_views_pair_nodes_with_their_nodeclaims() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "ip-1", "labels": {"karpenter.sh/nodepool": "general"}},
            "spec": {"providerID": "aws:///us-east-1a/i-1"},
            "status": {"capacity": {"cpu": "4"}}
        }))
        .unwrap();
        let mut claim = NodeClaim::test("general-abc");
        claim.metadata.annotations = Some(BTreeMap::from([("a".into(), "b".into())]));
        claim.status =
            Some(serde_json::from_value(json!({"providerID": "aws:///us-east-1a/i-1"})).unwrap());
        let pending = NodeClaim::test("general-def");
        let views = node_views(&[node], &[claim, pending]).unwrap();
        assert_eq!(views.len(), 2);
        assert_eq!(views[0].name, "ip-1");
        assert_eq!(views[0].nodeclaim.as_deref(), Some("general-abc"));
        assert_eq!(views[0].annotations.get("a").map(String::as_str), Some("b"));
        assert_eq!(views[0].capacity.get("cpu"), 4000);
        assert_eq!(views[1].name, "general-def");
        let bad: Node = serde_json::from_value(json!({
            "metadata": {"name": "ip-2"}, "status": {"capacity": {"cpu": "four"}}
        }))
        .unwrap();
        let e = node_views(&[bad], &[]).unwrap_err();
        assert!(e.starts_with("Node/ip-2: status.capacity.cpu:"), "{e}");
    }
}
