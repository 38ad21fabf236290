//! Kubernetes objects → the scheduling core's domain.
//!
//! Karpenter documents (NodePool, EC2NodeClass, NodeClaim) and Kubernetes
//! objects (Pod, Node, DaemonSet, volumes) become the pure values the
//! scheduling core solves over: [`NodePoolSpec`], [`crate::scheduling::ExistingNode`],
//! [`DaemonSetSpec`](crate::scheduling::DaemonSetSpec) and
//! [`PodSpec`](crate::scheduling::PodSpec). `plan`, the controller's
//! provisioner and the simulated EC2 all convert through here.
//!
//! The conversions are one small function per kind ([`nodepool_spec`],
//! [`kubelet_settings`], ...), and read the API types: the controller
//! converts the objects it holds without a JSON round trip, and `plan`
//! decodes its validated documents once. NodeOverlays alone are read as
//! JSON: their runtime validation is `validate`'s, over the document, and
//! runs once per change of the overlays.
//!
//! `build_input` assembles a `SolveInput`: snapshot Nodes and NodeClaims
//! become `ExistingNode`s, and a NodePool's instance types are those its
//! EC2NodeClass's kubelet settings give
//! (`model::InstanceType::for_node_class`). A controller builds one pass
//! after pass: [`build_input_kept`] converts only the Nodes and bound pods
//! that changed since the last ([`KeptExisting`]), so one replaced node
//! does not convert every node and pod of the cluster again, and
//! [`build_input_bound`] takes the pods bound to each node from a grouping
//! the controller keeps ([`BoundPods`]) instead of grouping them again;
//! [`PodSpecs`] keeps, the same way, the pods that need a place (the lower
//! bound's, the disruption candidates').

mod kinds;
mod overlay;

use serde_json::Value;

pub use kinds::{
    BoundPods, KeptExisting, PodSpecs, PodsOnNodes, daemonset_spec, existing_nodes,
    existing_nodes_bound, kubelet_settings, nodepool_spec, nodepool_spec_with_types,
};
pub use overlay::{apply_overlays, overlay};

use crate::api::{EC2NodeClass, NodePool, SlimPod};
use crate::diag::Pos;
use crate::model::InstanceType;
use crate::scheduling::pod::{VolumeIndex, is_provisionable, pod_spec};
use crate::scheduling::{NodePoolSpec, SolveInput};
use crate::snapshot::{Located, Origin, Snapshot};

/// An object that cannot be converted, at its file and line (no file for
/// objects read from a cluster, line 0 when unknown).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{object}: {message}", where_(file, *line))]
pub struct Invalid {
    pub file: String,
    pub line: usize,
    pub object: String,
    pub message: String,
}

impl Invalid {
    /// The problem as a diagnostic at its file and line.
    pub fn diagnostic(&self) -> crate::diag::Diagnostic {
        crate::diag::Diagnostic::error("object", self.message.clone())
            .in_file(self.file.clone())
            .at(Pos {
                line: u32::try_from(self.line).unwrap_or(u32::MAX),
                column: u32::from(self.line > 0),
            })
            .with_object(self.object.clone())
    }
}

/// The workload a pod belongs to, as (kind, namespace, name): its
/// controller, or the Deployment of its ReplicaSet (named
/// `<deployment>-<pod-template-hash>`). `plan` and `simulate` group pods by
/// it.
pub fn workload_of(pod: &SlimPod) -> Option<(String, String, String)> {
    let o = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))?;
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let hash = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash"));
    if o.kind == "ReplicaSet"
        && let Some(deployment) = hash.and_then(|h| o.name.strip_suffix(&format!("-{h}")))
    {
        return Some(("Deployment".into(), ns, deployment.to_string()));
    }
    Some((o.kind.clone(), ns, o.name.clone()))
}

fn where_(file: &str, line: usize) -> String {
    match (file.is_empty(), line) {
        (true, _) => String::new(),
        (false, 0) => format!("{file}: "),
        (false, l) => format!("{file}:{l}: "),
    }
}

/// Karpenter documents of the config repository.
#[derive(Debug, Clone, Default)]
pub struct ConfigDocs {
    /// (file, object) of each NodePool.
    pub nodepools: Vec<(String, Located)>,
    pub nodeclasses: Vec<(String, Located)>,
    /// The NodeOverlays, applied to the NodePools' instance types (only
    /// under the `NodeOverlay` feature gate: a caller without it clears
    /// them).
    pub overlays: Vec<crate::model::overlay::Overlay>,
}

impl ConfigDocs {
    /// The NodePools and EC2NodeClasses of a validated repository.
    pub fn from_report(report: &crate::config::validate::Report) -> Self {
        use crate::api::ApiKind;
        let located = |o: &crate::config::validate::Object| {
            (
                o.file.clone(),
                Located {
                    line: o.pos.line as usize,
                    object: o.value.clone(),
                },
            )
        };
        ConfigDocs {
            nodepools: report.objects_of(ApiKind::NodePool).map(located).collect(),
            nodeclasses: report
                .objects_of(ApiKind::EC2NodeClass)
                .map(located)
                .collect(),
            overlays: report
                .objects_of(ApiKind::NodeOverlay)
                .map(|o| overlay(&o.value))
                .collect(),
        }
    }

    /// Takes out the static NodePools (`spec.replicas` set) and returns
    /// their names: pending pods never get new capacity from them (the
    /// reference's provisioner leaves them out, whatever its gates), they
    /// keep their replica count on their own.
    pub fn take_static(&mut self) -> Vec<String> {
        let (statics, dynamic): (Vec<_>, Vec<_>) = std::mem::take(&mut self.nodepools)
            .into_iter()
            .partition(|(_, l)| {
                l.object
                    .pointer("/spec/replicas")
                    .is_some_and(|r| !r.is_null())
            });
        self.nodepools = dynamic;
        statics
            .iter()
            .filter_map(|(_, l)| l.object.pointer("/metadata/name")?.as_str())
            .map(str::to_string)
            .collect()
    }
}

/// Builds the core's input from already-read documents: NodePools see the
/// catalog as their EC2NodeClass configures the kubelet.
pub fn build_input(
    config: &ConfigDocs,
    catalog: &[InstanceType],
    pods: &[(Pos, SlimPod)],
    pods_file: &str,
    snapshot: Option<(&Snapshot, &Origin)>,
    now_ms: i64,
) -> Result<SolveInput, Invalid> {
    let nodepools = nodepool_specs(config, catalog)?;
    build_input_from(
        nodepools,
        catalog,
        pods,
        pods_file,
        snapshot,
        now_ms,
        &mut KeptExisting::default(),
    )
}

/// The core's NodePools from the repository's documents and a catalog,
/// with the repository's NodeOverlays applied.
pub fn nodepool_specs(
    config: &ConfigDocs,
    catalog: &[InstanceType],
) -> Result<Vec<NodePoolSpec>, Invalid> {
    nodepool_specs_with_overlays(config, catalog).map(|(specs, _)| specs)
}

/// [`nodepool_specs`], with what the overlays did.
pub fn nodepool_specs_with_overlays(
    config: &ConfigDocs,
    catalog: &[InstanceType],
) -> Result<(Vec<NodePoolSpec>, crate::model::overlay::Outcome), Invalid> {
    let mut specs = nodepool_specs_plain(config, catalog)?;
    let outcome = apply_overlays(&config.overlays, &mut specs);
    Ok((specs, outcome))
}

fn nodepool_specs_plain(
    config: &ConfigDocs,
    catalog: &[InstanceType],
) -> Result<Vec<NodePoolSpec>, Invalid> {
    let invalid = |file: &str, o: &Located, message: String| Invalid {
        file: file.to_string(),
        line: o.line,
        object: crate::diag::kind_name(&o.object),
        message,
    };
    let mut classes = Vec::new();
    for (file, o) in &config.nodeclasses {
        let class: EC2NodeClass = typed(&o.object).map_err(|m| invalid(file, o, m))?;
        let k = kubelet_settings(&class).map_err(|m| invalid(file, o, m))?;
        classes.push((class.metadata.name.clone().unwrap_or_default(), k));
    }
    config
        .nodepools
        .iter()
        .map(|(file, o)| {
            typed::<NodePool>(&o.object)
                .and_then(|pool| nodepool_spec(&pool, &classes, catalog))
                .map_err(|m| invalid(file, o, m))
        })
        .collect()
}

/// A validated document as its API type (the conversions read the types,
/// not JSON).
fn typed<K: serde::de::DeserializeOwned>(doc: &Value) -> Result<K, String> {
    K::deserialize(doc).map_err(|e| e.to_string())
}

/// Builds the core's input around NodePools already built: existing nodes,
/// in-flight NodeClaims (sized from `catalog` until they report their own
/// capacity), DaemonSets and pending pods of the snapshot (objects of a
/// cluster, named without a file), and `pods`.
pub fn build_input_with_pools(
    nodepools: Vec<NodePoolSpec>,
    catalog: &[InstanceType],
    pods: &[(Pos, SlimPod)],
    pods_file: &str,
    snapshot: Option<&Snapshot>,
    now_ms: i64,
) -> Result<SolveInput, Invalid> {
    let origin = Origin::default();
    build_input_from(
        nodepools,
        catalog,
        pods,
        pods_file,
        snapshot.map(|s| (s, &origin)),
        now_ms,
        &mut KeptExisting::default(),
    )
}

/// [`build_input_with_pools`] for a cluster's snapshot alone, converting
/// only the Nodes and bound pods `kept` does not hold already: what a
/// controller that builds its input pass after pass calls.
pub fn build_input_kept(
    nodepools: Vec<NodePoolSpec>,
    catalog: &[InstanceType],
    snapshot: &Snapshot,
    now_ms: i64,
    kept: &mut KeptExisting,
) -> Result<SolveInput, Invalid> {
    let origin = Origin::default();
    build_input_from(
        nodepools,
        catalog,
        &[],
        "",
        Some((snapshot, &origin)),
        now_ms,
        kept,
    )
}

/// [`build_input_with_pools`] for a snapshot read from a file: a problem
/// names the snapshot's file and the object's line. `kept` holds the Nodes
/// and bound pods converted before (a one-shot caller passes an empty one).
pub fn build_input_from(
    nodepools: Vec<NodePoolSpec>,
    catalog: &[InstanceType],
    pods: &[(Pos, SlimPod)],
    pods_file: &str,
    snapshot: Option<(&Snapshot, &Origin)>,
    now_ms: i64,
    kept: &mut KeptExisting,
) -> Result<SolveInput, Invalid> {
    let snapshot = snapshot.map(|(s, origin)| (s, origin, None));
    build_input_read(nodepools, catalog, pods, pods_file, snapshot, now_ms, kept)
}

/// The scheduling input of a controller's pass over its cluster without
/// pending pods: [`build_input_kept`] with the pods bound to each node read
/// from `bound`, which groups them already; the snapshot's pods are not
/// read.
pub fn build_input_bound(
    nodepools: Vec<NodePoolSpec>,
    catalog: &[InstanceType],
    snapshot: &Snapshot,
    bound: &BoundPods,
    now_ms: i64,
    kept: &mut KeptExisting,
) -> Result<SolveInput, Invalid> {
    let origin = Origin::default();
    let snapshot = Some((snapshot, &origin, Some(bound)));
    build_input_read(nodepools, catalog, &[], "", snapshot, now_ms, kept)
}

/// [`build_input_from`], or [`build_input_bound`] when the snapshot comes
/// with its bound pods grouped.
fn build_input_read(
    nodepools: Vec<NodePoolSpec>,
    catalog: &[InstanceType],
    pods: &[(Pos, SlimPod)],
    pods_file: &str,
    snapshot: Option<(&Snapshot, &Origin, Option<&BoundPods>)>,
    now_ms: i64,
    kept: &mut KeptExisting,
) -> Result<SolveInput, Invalid> {
    let mut input = SolveInput {
        nodepools,
        ..SolveInput::default()
    };
    let mut volumes = VolumeIndex::default();
    if let Some((s, origin, bound)) = snapshot {
        let invalid = |object: String, message: String| Invalid {
            file: origin.file.clone(),
            line: origin.line(&object),
            object,
            message,
        };
        volumes = VolumeIndex::new(
            &s.persistent_volume_claims,
            &s.persistent_volumes,
            &s.storage_classes,
        );
        input.nodes = match bound {
            Some(bound) => existing_nodes_bound(s, bound, catalog, kept),
            None => existing_nodes(s, catalog, kept),
        }
        .map_err(|(object, message)| invalid(object, message))?;
        for ds in &s.daemonsets {
            input
                .daemonsets
                .push(daemonset_spec(ds, now_ms).map_err(|message| {
                    invalid(
                        format!(
                            "DaemonSet/{}/{}",
                            ds.metadata.namespace.as_deref().unwrap_or("default"),
                            ds.metadata.name.as_deref().unwrap_or("")
                        ),
                        message,
                    )
                })?);
        }
        let pending = match bound {
            Some(_) => &[][..],
            None => &s.pods[..],
        };
        for p in pending.iter().filter(|p| is_provisionable(p)) {
            input.pods.push(std::sync::Arc::new(
                pod_spec(p, &volumes, now_ms)
                    .map_err(|e| invalid(format!("Pod/{}", e.pod), e.message))?,
            ));
        }
    }
    // Every pod of --pods that is not bound and not a DaemonSet's is pending.
    for (pos, p) in pods {
        let bound = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        if bound || p.is_daemon() {
            continue;
        }
        let spec = pod_spec(p, &volumes, now_ms).map_err(|e| Invalid {
            file: pods_file.to_string(),
            line: pos.line as usize,
            object: format!("Pod/{}", e.pod),
            message: e.message,
        })?;
        input.pods.push(std::sync::Arc::new(spec));
    }
    Ok(input)
}
