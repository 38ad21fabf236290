//! Why a pod cannot get a new NodeClaim, for the cases a generic reason
//! ("no instance type in NodePool X has cpu=1") hides: a pod whose node
//! affinity contradicts itself, a NodePool without instance types (an empty
//! catalog), instance types without any offering, and the first requirement
//! of the pod or the NodePool that no instance type satisfies (as
//! `validate --catalog` names it for NodePools).
//!
//! Computed from the solver's input alone, after a solve, for pods it could
//! not place.

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use super::types::{NodePoolSpec, PodSpec, SolveInput};
use crate::api::SlimPod;
use crate::model::labels::{is_well_known, normalize_key};
use crate::model::{InstanceType, Operator, Requirement};

/// The reason a NodePool cannot hold a pod.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PoolReason {
    pub nodepool: String,
    pub reason: String,
}

/// A precise reason, when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Explanation {
    /// The pod itself can never be placed, whatever the NodePool.
    Pod(String),
    /// Per NodePool, for the NodePools with a precise reason.
    Pools(Vec<PoolReason>),
}

/// A requirement as the pod or NodePool wrote it, with where it came from.
struct Written {
    source: String,
    key: String,
    requirement: Requirement,
}

fn written(source: &str, e: &NodeSelectorRequirement) -> Option<Written> {
    let op = Operator::parse(&e.operator)?;
    let key = normalize_key(&e.key).to_string();
    let values = e.values.clone().unwrap_or_default();
    let requirement = Requirement::new(&key, op, &values).ok()?;
    Some(Written {
        source: source.to_string(),
        key,
        requirement,
    })
}

/// Two requirements on one key that no node can satisfy together.
fn contradict(a: &Requirement, b: &Requirement) -> bool {
    a.intersection(b).is_empty() && !(a.allows_absent() && b.allows_absent())
}

/// The first contradiction among the requirements of one alternative.
fn contradiction(reqs: &[Written]) -> Option<String> {
    for (i, a) in reqs.iter().enumerate() {
        for b in &reqs[i + 1..] {
            if a.key == b.key && contradict(&a.requirement, &b.requirement) {
                return Some(format!(
                    "{} {} {} and {} {} {} allow no value of {}",
                    a.source, a.key, a.requirement, b.source, b.key, b.requirement, a.key
                ));
            }
        }
    }
    None
}

/// Whether the pod's nodeSelector and required node affinity contradict
/// themselves: every required term (or the nodeSelector alone) asks for
/// two things of one label that no node has at once.
pub fn self_contradiction(pod: &SlimPod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let selector: Vec<Written> = spec
        .node_selector
        .iter()
        .flatten()
        .filter_map(|(k, v)| {
            written(
                "nodeSelector",
                &NodeSelectorRequirement {
                    key: k.clone(),
                    operator: "In".into(),
                    values: Some(vec![v.clone()]),
                },
            )
        })
        .collect();
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or(&[]);
    if terms.is_empty() {
        return None;
    }
    let mut why = Vec::new();
    for (i, term) in terms.iter().enumerate() {
        let source = if terms.len() == 1 {
            "required node affinity".to_string()
        } else {
            format!("required node affinity term {}", i + 1)
        };
        let mut reqs: Vec<Written> = selector
            .iter()
            .map(|w| Written {
                source: w.source.clone(),
                key: w.key.clone(),
                requirement: w.requirement.clone(),
            })
            .collect();
        reqs.extend(
            term.match_expressions
                .iter()
                .flatten()
                .filter_map(|e| written(&source, e)),
        );
        why.push(contradiction(&reqs)?);
    }
    Some(format!(
        "the pod's node affinity contradicts itself: {}",
        why.join("; ")
    ))
}

/// Whether an instance type can satisfy one requirement.
fn type_satisfies(t: &InstanceType, key: &str, r: &Requirement) -> bool {
    match t.requirements.get(key) {
        Some(tr) => !contradict(tr, r),
        None => !is_well_known(key) || r.allows_absent(),
    }
}

/// Why `pool` cannot hold a pod with these requirements, when one of them
/// (or the pool) rules out every instance type.
fn pool_reason(pool: &NodePoolSpec, pod: &PodSpec) -> Option<String> {
    let name = &pool.name;
    if pool.instance_types.is_empty() {
        return Some(format!(
            "NodePool {name} has no instance types (is the catalog empty?)"
        ));
    }
    if pool.instance_types.iter().all(|t| t.offerings.is_empty()) {
        return Some(format!(
            "none of the {} instance types of NodePool {name} has an offering (do the catalog's zones match the cluster's?)",
            pool.instance_types.len()
        ));
    }
    if pool
        .instance_types
        .iter()
        .all(|t| t.offerings.iter().all(|o| !o.available))
    {
        return Some(format!(
            "no offering of the {} instance types of NodePool {name} is available",
            pool.instance_types.len()
        ));
    }
    // The pod's requirements, then the first required term's, then the
    // pool's own, in that order: the first that no instance type satisfies.
    let mut ordered: Vec<(&str, &String, &Requirement)> = pod
        .node_selector
        .0
        .iter()
        .map(|(k, r)| ("the pod requires", k, r))
        .collect();
    if let Some(t) = pod.required_terms.first() {
        ordered.extend(t.0.iter().map(|(k, r)| ("the pod requires", k, r)));
    }
    ordered.extend(
        pool.requirements
            .0
            .iter()
            .map(|(k, r)| ("the NodePool requires", k, r)),
    );
    for (who, key, r) in ordered {
        // A label the NodePool sets itself is not the instance type's.
        if who == "the pod requires"
            && let Some(pr) = pool.requirements.get(key)
            && !is_well_known(key)
        {
            if contradict(pr, r) {
                return Some(format!(
                    "NodePool {name} requires {key} {pr}, but {who} {key} {r}"
                ));
            }
            continue;
        }
        if !is_well_known(key)
            && !pool
                .instance_types
                .iter()
                .any(|t| t.requirements.get(key).is_some())
        {
            continue;
        }
        if !pool
            .instance_types
            .iter()
            .any(|t| type_satisfies(t, key, r))
        {
            return Some(format!(
                "no instance type of NodePool {name} satisfies {key} {r} ({who} it)"
            ));
        }
    }
    None
}

/// A precise reason why `pod` cannot get a new NodeClaim, if the input
/// alone shows one.
pub fn explain(input: &SolveInput, spec: &PodSpec, pod: &SlimPod) -> Option<Explanation> {
    if let Some(why) = self_contradiction(pod) {
        return Some(Explanation::Pod(why));
    }
    if input.nodepools.is_empty() {
        return Some(Explanation::Pod("there is no NodePool".into()));
    }
    let pools: Vec<PoolReason> = input
        .nodepools
        .iter()
        .filter_map(|p| {
            pool_reason(p, spec).map(|reason| PoolReason {
                nodepool: p.name.clone(),
                reason,
            })
        })
        .collect();
    (!pools.is_empty()).then_some(Explanation::Pools(pools))
}

/// The solver's reason split by NodePool: each `; `-separated part goes to
/// the first NodePool it names (`NodePool <name>`), the rest to none.
pub fn split_by_pool(reason: &str, pools: &[String]) -> Vec<(Option<String>, String)> {
    reason
        .split("; ")
        .map(|part| {
            let pool = pools
                .iter()
                .filter(|p| {
                    let needle = format!("NodePool {p}");
                    part.match_indices(&needle).any(|(i, _)| {
                        part[i + needle.len()..]
                            .chars()
                            .next()
                            .is_none_or(|c| !c.is_alphanumeric() && c != '-' && c != '.')
                    })
                })
                .max_by_key(|p| p.len())
                .cloned();
            (pool, part.to_string())
        })
        .collect()
}

/// The reasons of a pod per NodePool: the precise ones where there are,
/// the solver's elsewhere; and the text that joins them.
pub fn reasons(
    input: &SolveInput,
    spec: Option<&PodSpec>,
    pod: Option<&SlimPod>,
    solver: &str,
) -> (String, Vec<(Option<String>, String)>) {
    let names: Vec<String> = input.nodepools.iter().map(|p| p.name.clone()).collect();
    let solver_parts = split_by_pool(solver, &names);
    let explained = match (spec, pod) {
        (Some(s), Some(p)) => explain(input, s, p),
        _ => None,
    };
    let parts: Vec<(Option<String>, String)> = match explained {
        Some(Explanation::Pod(why)) => vec![(None, why)],
        Some(Explanation::Pools(pools)) => {
            let mut out: Vec<(Option<String>, String)> = Vec::new();
            for (pool, part) in solver_parts {
                match pool
                    .as_ref()
                    .and_then(|p| pools.iter().find(|r| &r.nodepool == p))
                {
                    Some(r) => {
                        if !out.iter().any(|(p, _)| p.as_ref() == Some(&r.nodepool)) {
                            out.push((Some(r.nodepool.clone()), r.reason.clone()));
                        }
                    }
                    None => out.push((pool, part)),
                }
            }
            for r in pools {
                if !out.iter().any(|(p, _)| p.as_ref() == Some(&r.nodepool)) {
                    out.push((Some(r.nodepool), r.reason));
                }
            }
            out
        }
        None => solver_parts,
    };
    let text = parts
        .iter()
        .map(|(_, r)| r.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    (text, parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Offering;
    use crate::model::{Requirements, Resources};
    use crate::testing::from_json as pod;

    fn it(name: &str, zone: &str) -> InstanceType {
        let mut t = InstanceType {
            name: name.into(),
            requirements: Requirements::new(),
            capacity: Resources::new().with("cpu", 2000),
            overhead: Default::default(),
            allocatable: Resources::new().with("cpu", 2000),
            offerings: vec![Offering {
                zone: zone.into(),
                capacity_type: "on-demand".into(),
                price: 0.1,
                available: true,
                reservations: Vec::new(),
            }],
        };
        t.complete_requirements();
        t
    }

    fn pool(name: &str, types: Vec<InstanceType>) -> NodePoolSpec {
        NodePoolSpec {
            name: name.into(),
            weight: 0,
            requirements: Requirements::new(),
            labels: Default::default(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            limits: Resources::new(),
            instance_types: types,
        }
    }

    #[test]
    fn a_pod_whose_affinity_contradicts_itself() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [],
                "nodeSelector": {"topology.kubernetes.io/zone": "a"},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}]}
                ]}}}}
        }));
        assert_eq!(
            self_contradiction(&p).unwrap(),
            "the pod's node affinity contradicts itself: nodeSelector topology.kubernetes.io/zone In [a] and required node affinity topology.kubernetes.io/zone In [b] allow no value of topology.kubernetes.io/zone"
        );
        // One satisfiable term is enough.
        let ok = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "k", "operator": "In", "values": ["a"]}, {"key": "k", "operator": "NotIn", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "k", "operator": "Exists"}]}
                ]}}}}
        }));
        assert_eq!(self_contradiction(&ok), None);
    }

    #[test]
    fn pools_without_types_offerings_or_a_matching_type_are_named() {
        let spec = PodSpec::new("default", "p", Resources::new().with("cpu", 1000));
        let empty = pool("empty", Vec::new());
        assert_eq!(
            pool_reason(&empty, &spec).unwrap(),
            "NodePool empty has no instance types (is the catalog empty?)"
        );
        let mut no_offer = it("m5.large", "a");
        no_offer.offerings.clear();
        assert!(
            pool_reason(&pool("p", vec![no_offer]), &spec)
                .unwrap()
                .starts_with("none of the 1 instance types of NodePool p has an offering")
        );
        let mut wants = spec.clone();
        wants.node_selector.add(
            crate::model::labels::INSTANCE_TYPE,
            Requirement::in_values(["p5.48xlarge"]),
        );
        assert_eq!(
            pool_reason(&pool("general", vec![it("m5.large", "a")]), &wants).unwrap(),
            "no instance type of NodePool general satisfies node.kubernetes.io/instance-type In [p5.48xlarge] (the pod requires it)"
        );
        assert_eq!(
            pool_reason(&pool("general", vec![it("m5.large", "a")]), &spec),
            None
        );
    }

    #[test]
    fn the_solver_reason_splits_by_pool() {
        let parts = split_by_pool(
            "no instance type in NodePool general has cpu=64; NodePool gpu-large would exceed limit cpu=8; other",
            &["general".into(), "gpu".into(), "gpu-large".into()],
        );
        let pools: Vec<Option<&str>> = parts.iter().map(|(p, _)| p.as_deref()).collect();
        assert_eq!(pools, [Some("general"), Some("gpu-large"), None]);
    }
}
