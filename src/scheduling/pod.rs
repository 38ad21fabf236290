//! From Kubernetes Pods to [`PodSpec`]: which pods are provisionable, what
//! each requests (as kube computes it) and what it requires.
//!
//! `resource_problems` names the resource quantities the API server would
//! reject; snapshot and `plan` files report them as diagnostics.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim, PodAffinityTerm as K8sTerm,
};

use k8s_openapi::api::storage::v1::StorageClass;

use super::types::{HostPort, Namespaces, PodAffinityTerm, PodSpec, TopologySpread, Unsatisfiable};
use crate::api::{SlimContainer, SlimPod, SlimPodSpec};
use crate::diag::JsonPath;
use crate::model::labels::{LabelSelector, normalize_key};
use crate::model::quantity::{PODS, parse_quantity};
use crate::model::{Requirement, Requirements, Resources, Toleration};

/// Why a pod could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {pod}: {message}")]
pub struct PodError {
    pub pod: String,
    pub message: String,
}

/// Is this pod one the provisioner should find capacity for? As the
/// reference defines it: PodScheduled=False with reason Unschedulable, no
/// nodeName, no nominatedNodeName, not owned by a DaemonSet or a Node, and
/// not terminating or finished.
pub fn is_provisionable(pod: &SlimPod) -> bool {
    // Most pods of a cluster are bound: that answers first.
    let unbound = pod
        .spec
        .as_ref()
        .is_some_and(|s| s.node_name.as_deref().unwrap_or("").is_empty());
    if !unbound || pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let nominated = status
        .nominated_node_name
        .as_deref()
        .is_some_and(|n| !n.is_empty());
    let unschedulable = status.conditions.as_ref().is_some_and(|cs| {
        cs.iter().any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
    });
    !nominated && unschedulable && !pod.is_finished() && is_provisionable_once_pending(pod)
}

/// Whether a bound pod would be provisionable once it is pending again (no
/// node, `PodScheduled=False` with reason Unschedulable, phase Pending):
/// not terminating, and not a DaemonSet's or a Node's. The provisioner
/// asks this of the pods leaving with a deleting node.
pub fn is_provisionable_once_pending(pod: &SlimPod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && !pod.is_daemon()
        && !crate::api::pod::is_node_owned(&pod.metadata)
}

/// Persistent volume objects used to derive volume topology requirements.
#[derive(Debug, Clone, Default)]
pub struct VolumeIndex {
    /// Claims by `namespace/name`.
    pub claims: BTreeMap<String, PersistentVolumeClaim>,
    pub volumes: BTreeMap<String, PersistentVolume>,
    pub storage_classes: BTreeMap<String, StorageClass>,
}

impl VolumeIndex {
    /// The index of a cluster's claims, volumes and storage classes.
    pub fn new<C, V, S>(claims: &[C], volumes: &[V], storage_classes: &[S]) -> Self
    where
        C: std::ops::Deref<Target = PersistentVolumeClaim>,
        V: std::ops::Deref<Target = PersistentVolume>,
        S: std::ops::Deref<Target = StorageClass>,
    {
        let mut index = VolumeIndex::default();
        for c in claims {
            let key = format!(
                "{}/{}",
                c.metadata.namespace.as_deref().unwrap_or("default"),
                c.metadata.name.as_deref().unwrap_or("")
            );
            index.claims.insert(key, (**c).clone());
        }
        for v in volumes {
            index
                .volumes
                .insert(v.metadata.name.clone().unwrap_or_default(), (**v).clone());
        }
        for sc in storage_classes {
            index
                .storage_classes
                .insert(sc.metadata.name.clone().unwrap_or_default(), (**sc).clone());
        }
        index
    }

    /// Zonal requirements of a pod's volumes: node affinity of bound
    /// PersistentVolumes, and allowedTopologies of WaitForFirstConsumer
    /// StorageClasses for unbound claims.
    fn requirements(&self, ns: &str, pod: &SlimPod) -> Result<Requirements, String> {
        let mut out = Requirements::new();
        let Some(spec) = &pod.spec else {
            return Ok(out);
        };
        for v in spec.volumes.iter().flatten() {
            let Some(pvc_ref) = &v.persistent_volume_claim else {
                continue;
            };
            let Some(pvc) = self.claims.get(&format!("{ns}/{}", pvc_ref.claim_name)) else {
                continue;
            };
            let pvc_spec = pvc.spec.as_ref();
            let volume_name = pvc_spec
                .and_then(|s| s.volume_name.as_deref())
                .unwrap_or("");
            if let Some(pv) = self.volumes.get(volume_name) {
                let terms = pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_affinity.as_ref())
                    .and_then(|a| a.required.as_ref())
                    .map(|r| r.node_selector_terms.as_slice())
                    .unwrap_or(&[]);
                // A volume is reachable from one term; zonal volumes have one.
                if let Some(term) = terms.first() {
                    out.intersect_with(&term_requirements(term)?);
                }
                continue;
            }
            let class_name = pvc_spec
                .and_then(|s| s.storage_class_name.as_deref())
                .unwrap_or("");
            if let Some(sc) = self.storage_classes.get(class_name)
                && sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
            {
                for topo in sc.allowed_topologies.iter().flatten() {
                    for e in topo.match_label_expressions.iter().flatten() {
                        out.add(&e.key, Requirement::in_values(e.values.iter().cloned()));
                    }
                }
            }
        }
        Ok(out)
    }
}

fn term_requirements(term: &NodeSelectorTerm) -> Result<Requirements, String> {
    let mut r = Requirements::from_node_selector(term.match_expressions.as_deref().unwrap_or(&[]))
        .map_err(|e| e.to_string())?;
    // matchFields only supports metadata.name; the scheduler cannot know the
    // name of a node it has not launched, so such terms pin to a hostname.
    for f in term.match_fields.iter().flatten() {
        if f.key == "metadata.name" {
            let values = f.values.clone().unwrap_or_default();
            r.add(
                crate::model::labels::HOSTNAME,
                Requirement::new(
                    crate::model::labels::HOSTNAME,
                    crate::model::Operator::parse(&f.operator)
                        .ok_or_else(|| format!("unknown operator {:?}", f.operator))?,
                    &values,
                )
                .map_err(|e| e.to_string())?,
            );
        }
    }
    Ok(r)
}

/// The resource quantities of a pod spec the API server would reject: each
/// container's (and init container's) requests and limits and the pod's
/// overhead must be quantities, and none may be negative. Paths are
/// relative to the pod spec (`containers[0].resources.requests.cpu`).
pub fn resource_problems(spec: &SlimPodSpec) -> Vec<(JsonPath, String)> {
    let mut out = Vec::new();
    // Negative by its sign and a non-zero digit: `-1m` of memory rounds
    // to zero bytes but is still negative.
    let negative = |q: &str| {
        let t = q.trim();
        t.starts_with('-')
            && t[1..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .any(|c| matches!(c, '1'..='9'))
    };
    // The path is built only for a quantity that fails: this runs for every
    // pod the controller converts.
    let mut check = |path: &dyn Fn() -> JsonPath, name: &str, q: &str| match parse_quantity(name, q)
    {
        Err(e) => out.push((path(), e.to_string())),
        Ok(_) if negative(q) => {
            out.push((path(), format!("{q:?}: must be greater than or equal to 0")))
        }
        Ok(_) => {}
    };
    for (field, list) in [
        ("containers", Some(&spec.containers)),
        ("initContainers", spec.init_containers.as_ref()),
    ] {
        for (i, c) in list.into_iter().flatten().enumerate() {
            let Some(res) = &c.resources else { continue };
            for (kind, map) in [("requests", &res.requests), ("limits", &res.limits)] {
                for (name, q) in map.iter().flatten() {
                    let path = || {
                        JsonPath::root()
                            .key(field)
                            .index(i)
                            .key("resources")
                            .key(kind)
                            .key(name.clone())
                    };
                    check(&path, name, &q.0);
                }
            }
        }
    }
    for (name, q) in spec.overhead.iter().flatten() {
        check(
            &|| JsonPath::root().key("overhead").key(name.clone()),
            name,
            &q.0,
        );
    }
    out
}

/// Effective requests of containers as kube computes them: the larger of the
/// sum of containers (plus restartable sidecars) and each init container
/// (plus the sidecars started before it), plus pod overhead, plus one `pods`.
pub fn pod_requests(pod: &SlimPod) -> Result<Resources, String> {
    pod_requests_with_defaults(pod, &Resources::new())
}

/// [`pod_requests`] where each container that does not request a resource
/// listed in `missing` counts that amount instead, as kube-scheduler's
/// scoring does with its non-zero defaults (`NonMissingContainerRequests`:
/// 100m cpu and 200Mi memory). An explicit zero request stays zero.
pub fn pod_requests_with_defaults(pod: &SlimPod, missing: &Resources) -> Result<Resources, String> {
    let Some(spec) = &pod.spec else {
        return Ok(Resources::new().with(PODS, 1));
    };
    if let Some((path, message)) = resource_problems(spec).into_iter().next() {
        return Err(format!("spec.{path}: {message}"));
    }
    let req = |c: &SlimContainer| -> Result<Resources, String> {
        let mut out = match &c.resources {
            Some(res) => {
                // A limit without a request defaults the request: limits
                // first, requests over them.
                let pairs = res
                    .limits
                    .iter()
                    .chain(res.requests.iter())
                    .flatten()
                    .map(|(k, v)| (k.as_str(), v.0.as_str()));
                Resources::parse(pairs)
                    .map_err(|(n, e)| format!("container {}: {n}: {e}", c.name))?
            }
            None => Resources::new(),
        };
        for (name, amount) in &missing.0 {
            out.0.entry(name.clone()).or_insert(*amount);
        }
        Ok(out)
    };
    let mut sum = Resources::new();
    for c in &spec.containers {
        sum.add(&req(c)?);
    }
    let mut sidecars = Resources::new();
    let mut init_max = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let r = req(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            let mut with = sidecars.clone();
            with.max_with(&Resources::new());
            init_max.max_with(&with);
        } else {
            let mut with = r;
            with.add(&sidecars);
            init_max.max_with(&with);
        }
    }
    sum.add(&sidecars);
    sum.max_with(&init_max);
    if let Some(overhead) = &spec.overhead {
        sum.add(&Resources::from_k8s(overhead).map_err(|(n, e)| format!("overhead {n}: {e}"))?);
    }
    sum.set(PODS, 1);
    Ok(sum)
}

fn selector(
    s: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> Result<Option<LabelSelector>, String> {
    s.map(LabelSelector::from_k8s).transpose()
}

fn affinity_term(ns: &str, t: &K8sTerm) -> Result<Option<PodAffinityTerm>, String> {
    // A term without a label selector matches no pods.
    let Some(sel) = selector(t.label_selector.as_ref())? else {
        return Ok(None);
    };
    let names: BTreeSet<String> = t.namespaces.iter().flatten().cloned().collect();
    let namespaces = match &t.namespace_selector {
        Some(s)
            if s.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && s.match_expressions.as_ref().is_none_or(|m| m.is_empty()) =>
        {
            Namespaces::All
        }
        Some(s) if names.is_empty() => Namespaces::Selector(LabelSelector::from_k8s(s)?),
        _ if names.is_empty() => Namespaces::Names([ns.to_string()].into_iter().collect()),
        _ => Namespaces::Names(names),
    };
    Ok(Some(PodAffinityTerm {
        selector: sel,
        namespaces,
        topology_key: normalize_key(&t.topology_key).to_string(),
    }))
}

/// Parses an RFC 3339 UTC timestamp into milliseconds since the epoch.
pub fn parse_time_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut ms = 0;
    if b.len() > 20 && b[19] == b'.' {
        let frac: String = s[20..].chars().take_while(char::is_ascii_digit).collect();
        let padded = format!("{frac:0<3}");
        ms = padded.get(0..3)?.parse::<i64>().ok()?;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((((days * 24 + h) * 60 + mi) * 60 + sec) * 1000 + ms)
}

/// Converts a Kubernetes Pod into the scheduler's view of it.
pub fn pod_spec(pod: &SlimPod, volumes: &VolumeIndex, now_ms: i64) -> Result<PodSpec, PodError> {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let name = pod.metadata.name.clone().unwrap_or_default();
    let err = |message: String| PodError {
        pod: format!("{ns}/{name}"),
        message,
    };
    let requests = pod_requests(pod).map_err(err)?;
    let mut out = PodSpec::new(&ns, &name, requests);
    out.labels = Arc::new(pod.metadata.labels.clone().unwrap_or_default());
    out.created_ms = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond())
        .unwrap_or(now_ms);
    let Some(spec) = &pod.spec else {
        return Ok(out);
    };
    for (k, v) in spec.node_selector.iter().flatten() {
        out.node_selector
            .add(k, Requirement::in_values([v.clone()]));
    }
    out.node_selector
        .intersect_with(&volumes.requirements(&ns, pod).map_err(err)?);
    out.tolerations = spec
        .tolerations
        .iter()
        .flatten()
        .map(Toleration::from_k8s)
        .collect::<Result<_, _>>()
        .map_err(err)?;
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        for p in c.ports.iter().flatten() {
            if let Some(hp) = p.host_port.filter(|p| *p > 0) {
                out.host_ports.push(HostPort {
                    ip: p.host_ip.clone().unwrap_or_default(),
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_string()),
                    port: hp,
                });
            }
        }
    }
    if let Some(aff) = &spec.affinity {
        if let Some(na) = &aff.node_affinity {
            if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
                for t in &req.node_selector_terms {
                    out.required_terms.push(term_requirements(t).map_err(err)?);
                }
            }
            for p in na
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                out.preferred_terms
                    .push((p.weight, term_requirements(&p.preference).map_err(err)?));
            }
        }
        if let Some(pa) = &aff.pod_affinity {
            for t in pa
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                out.affinity.extend(affinity_term(&ns, t).map_err(err)?);
            }
            for w in pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                if let Some(t) = affinity_term(&ns, &w.pod_affinity_term).map_err(err)? {
                    out.preferred_affinity.push((w.weight, t));
                }
            }
        }
        if let Some(pa) = &aff.pod_anti_affinity {
            for t in pa
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                out.anti_affinity
                    .extend(affinity_term(&ns, t).map_err(err)?);
            }
            for w in pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                if let Some(t) = affinity_term(&ns, &w.pod_affinity_term).map_err(err)? {
                    out.preferred_anti_affinity.push((w.weight, t));
                }
            }
        }
    }
    for c in spec.topology_spread_constraints.iter().flatten() {
        let mut sel = selector(c.label_selector.as_ref())
            .map_err(err)?
            .unwrap_or_default();
        for k in c.match_label_keys.iter().flatten() {
            if let Some(v) = out.labels.get(k) {
                sel.match_labels.insert(k.clone(), v.clone());
            }
        }
        let when = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => Unsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => Unsatisfiable::ScheduleAnyway,
            other => return Err(err(format!("unknown whenUnsatisfiable {other:?}"))),
        };
        out.spread.push(TopologySpread {
            topology_key: normalize_key(&c.topology_key).to_string(),
            max_skew: u32::try_from(c.max_skew.max(1)).unwrap_or(1),
            min_domains: c
                .min_domains
                .and_then(|m| u32::try_from(m).ok())
                .filter(|m| *m > 0),
            when_unsatisfiable: when,
            selector: sel,
            honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::from_json as pod;

    /// The API server rejects negative requests and limits, and quantities
    /// that do not parse; `plan` printed `requests cpu=-85` before.
    #[test]
    fn negative_and_invalid_quantities_are_rejected_at_their_field() {
        let p: SlimPod = pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "overhead": {"memory": "-1m"},
                "initContainers": [{"name": "i", "resources": {"limits": {"cpu": "lots"}}}],
                "containers": [
                    {"name": "ok", "resources": {"requests": {"cpu": "-0", "memory": "1Gi"}}},
                    {"name": "bad", "resources": {"requests": {"cpu": "-85m"}}}
                ]
            }
        }));
        let problems: Vec<(String, String)> = resource_problems(p.spec.as_ref().unwrap())
            .into_iter()
            .map(|(path, m)| (path.to_string(), m))
            .collect();
        assert_eq!(
            problems,
            [
                (
                    "containers[1].resources.requests.cpu".to_string(),
                    "\"-85m\": must be greater than or equal to 0".to_string()
                ),
                (
                    "initContainers[0].resources.limits.cpu".to_string(),
                    "invalid quantity \"lots\"; a quantity is a number with an optional suffix, such as 500m, 2, 1.5Gi or 1e3".to_string()
                ),
                (
                    "overhead.memory".to_string(),
                    "\"-1m\": must be greater than or equal to 0".to_string()
                ),
            ]
        );
        let e = pod_requests(&p).unwrap_err();
        assert!(
            e.starts_with("spec.containers[1].resources.requests.cpu: "),
            "{e}"
        );
    }

    #[test]
    fn requests_take_the_max_of_init_and_sum_with_sidecars_and_overhead() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "overhead": {"cpu": "10m"},
                "initContainers": [
                    {"name": "big-init", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
                    {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}
                ],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}}},
                    {"name": "b", "resources": {"limits": {"cpu": "250m"}}}
                ]
            }
        }));
        let r = pod_requests(&p).unwrap();
        // cpu: max(0.5+0.25+0.1 sidecar, 2 init) + 10m overhead
        assert_eq!(r.get("cpu"), 2010);
        assert_eq!(r.get("memory"), 2 << 30);
        assert_eq!(r.get("pods"), 1);
    }

    #[test]
    fn missing_container_requests_take_the_defaults() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [
                {"name": "none"},
                {"name": "cpu-only", "resources": {"requests": {"cpu": "1"}}},
                {"name": "zero", "resources": {"requests": {"cpu": "0", "memory": "0"}}}
            ]}
        }));
        let defaults = Resources::parse([("cpu", "100m"), ("memory", "200Mi")]).unwrap();
        let r = pod_requests_with_defaults(&p, &defaults).unwrap();
        assert_eq!(
            r.get("cpu"),
            1100,
            "missing requests default, explicit zero stays"
        );
        assert_eq!(r.get("memory"), 400 << 20);
        assert_eq!(pod_requests(&p).unwrap().get("cpu"), 1000);
    }

    #[test]
    fn provisionable_pods_follow_the_reference() {
        let mut p = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": []},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        }));
        assert!(is_provisionable(&p));
        p.spec.as_mut().unwrap().node_name = Some("n1".into());
        assert!(!is_provisionable(&p));
        p.spec.as_mut().unwrap().node_name = None;
        p.metadata.owner_references = Some(vec![
            serde_json::from_value(serde_json::json!(
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "1"}
            ))
            .unwrap(),
        ]);
        assert!(!is_provisionable(&p));
        // Owners by group, version and kind, as the reference's `IsOwnedBy`:
        // another group's DaemonSet kind (OpenKruise's) needs capacity like
        // any pod, and so does a pod whose owner only names a Node kind of
        // another group; a static pod's v1 Node does not.
        let owned = |api_version: &str, kind: &str| {
            let mut q = p.clone();
            q.metadata.owner_references = Some(vec![
                serde_json::from_value(serde_json::json!(
                    {"apiVersion": api_version, "kind": kind, "name": "o", "uid": "1"}
                ))
                .unwrap(),
            ]);
            q
        };
        assert!(is_provisionable(&owned(
            "apps.kruise.io/v1alpha1",
            "DaemonSet"
        )));
        assert!(is_provisionable(&owned("example.com/v1", "Node")));
        assert!(!is_provisionable(&owned("v1", "Node")));
    }

    #[test]
    fn parses_affinity_spread_and_beta_labels() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a", "rev": "1"},
                         "creationTimestamp": "2026-01-01T00:00:01Z"},
            "spec": {
                "nodeSelector": {"beta.kubernetes.io/arch": "arm64"},
                "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "kubernetes.io/hostname"}
                ]}},
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "failure-domain.beta.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "a"}},
                    "matchLabelKeys": ["rev"]}]
            }
        }));
        let s = pod_spec(&p, &VolumeIndex::default(), 0).unwrap();
        assert_eq!(
            s.node_selector.single_value("kubernetes.io/arch"),
            Some("arm64")
        );
        assert_eq!(s.host_ports.len(), 1);
        assert_eq!(
            s.anti_affinity[0].namespaces,
            Namespaces::Names(["ns".to_string()].into())
        );
        assert_eq!(s.spread[0].topology_key, "topology.kubernetes.io/zone");
        assert_eq!(
            s.spread[0]
                .selector
                .match_labels
                .get("rev")
                .map(String::as_str),
            Some("1")
        );
        assert_eq!(s.created_ms, parse_time_ms("2026-01-01T00:00:01Z").unwrap());
    }

    #[test]
    fn timestamps_parse_to_epoch_millis() {
        assert_eq!(parse_time_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_time_ms("2026-01-01T00:00:00.012Z"),
            Some(1_767_225_600_012)
        );
        assert_eq!(parse_time_ms("garbage"), None);
    }
}
