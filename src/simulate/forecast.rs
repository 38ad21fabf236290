//! A pull request's forecast (`dovetail diff --forecast`): two simulations
//! from the same snapshot of a cluster, one with the configuration at the
//! base revision and one at the head, side by side.
//!
//! The snapshot becomes the simulation's initial state ([`prepare`]):
//! its nodes run on instances the simulated EC2 adopts, its pods stay bound
//! where they are, and its workload controllers (Deployments, ReplicaSets,
//! StatefulSets, Jobs, DaemonSets) recreate what is evicted. An owner that
//! pods name but the snapshot lacks (a snapshot `kubectl` made of pods and
//! nodes only) is rebuilt from its pods. Its NodePools and EC2NodeClasses
//! are replaced by each side's configuration; what the live EC2NodeClasses
//! resolved their AMI aliases to is kept, so an unchanged class does not
//! drift. The run starts at the snapshot's latest timestamp, so the same
//! inputs give the same forecast.
//!
//! Each side is a `Simulation` of the prepared state with that side's
//! configuration given as objects (`Simulation::with_config`); the two run on
//! two threads, and their reports are compared into a `Forecast`, rendered as
//! text, Markdown and JSON.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::driver::{SimError, Simulation};
use super::report::Report;
use super::scenario::{Action, CloudSettings, Manifest, Scenario, Step};
use crate::api::ec2nodeclass::Ami;
use crate::clock::{Timestamp, format_rfc3339, parse_rfc3339};
use crate::diag::Pos;
use crate::snapshot::Located;
use crate::world::ec2::nodeclass::{DEFAULT_KUBERNETES_VERSION, ObservedAlias};
use crate::world::ec2::{DEFAULT_LAUNCH_DELAY, DEFAULT_REGION, ProviderIds, default_zones};

/// Whether a forecast uses objects of `kind`: those of a snapshot
/// ([`super::snapshot::KINDS`]) but NodePools, which each side's
/// configuration replaces (EC2NodeClasses too, but their status is read).
fn restored(kind: &str) -> bool {
    kind != "NodePool" && super::snapshot::KINDS.contains(&kind)
}

/// Why a forecast could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ForecastError {
    #[error("--scale {0}")]
    Scale(String),
    #[error("the forecast of {side} could not run: {source}")]
    Simulation {
        side: String,
        #[source]
        source: SimError,
    },
    #[error("{0}")]
    Setup(String),
}

/// A workload change over the window: `deployment/NS/NAME=N@2h`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScaleChange {
    pub namespace: String,
    pub name: String,
    pub replicas: u32,
    /// Offset from the start of the window.
    #[serde(serialize_with = "seconds")]
    pub at: Duration,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl ScaleChange {
    /// Parses `deployment/NS/NAME=N@OFFSET` (`@OFFSET` optional: at once).
    pub fn parse(s: &str) -> Result<ScaleChange, String> {
        let usage = || {
            format!(
                "{s:?} is not deployment/NAMESPACE/NAME=REPLICAS@OFFSET (e.g. deployment/shop/web=40@2h)"
            )
        };
        let (target, rest) = s.split_once('=').ok_or_else(usage)?;
        let (replicas, at) = rest.split_once('@').unwrap_or((rest, "0s"));
        let mut parts = target.split('/');
        let (Some(kind), Some(namespace), Some(name), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(usage());
        };
        if !kind.eq_ignore_ascii_case("deployment") && !kind.eq_ignore_ascii_case("deployments") {
            return Err(format!(
                "{s:?}: only Deployments are scaled (deployment/NAMESPACE/NAME=REPLICAS@OFFSET)"
            ));
        }
        if namespace.is_empty() || name.is_empty() {
            return Err(usage());
        }
        let replicas: u32 = replicas
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: the replicas must be a whole number"))?;
        if i64::from(replicas) > super::scenario::MAX_REPLICAS {
            return Err(format!(
                "{s:?}: at most {} replicas",
                super::scenario::MAX_REPLICAS
            ));
        }
        let at = match crate::timing::parse_duration(at.trim(), crate::timing::DurationSyntax::Hms)
        {
            Ok(crate::timing::NillableDuration::After(d)) => d,
            _ => {
                return Err(format!(
                    "{s:?}: the offset takes a duration such as 90m or 2h"
                ));
            }
        };
        Ok(ScaleChange {
            namespace: namespace.to_string(),
            name: name.to_string(),
            replicas,
            at,
        })
    }
}

/// `cr-0123456789abcdef0=8`: a reservation and how many instances it holds.
pub fn parse_reservation_count(s: &str) -> Result<(String, u32), String> {
    let (id, count) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: takes ID=COUNT, e.g. cr-0123456789abcdef0=8"))?;
    if !id.starts_with("cr-") || id.len() < 4 {
        return Err(format!("{s:?}: {id:?} is not a capacity reservation id"));
    }
    let count: u32 = count
        .parse()
        .ok()
        .filter(|c| u64::from(*c) <= super::scenario::MAX_RESERVATION_COUNT)
        .ok_or_else(|| {
            format!(
                "{s:?}: the count is an integer from 0 to {}",
                super::scenario::MAX_RESERVATION_COUNT
            )
        })?;
    Ok((id.to_string(), count))
}

/// The settings both sides share.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long each side runs.
    pub window: Duration,
    /// The instance-type catalog (default: the built-in one).
    pub catalog: Option<PathBuf>,
    /// From launch to a Ready node.
    pub launch_delay: Duration,
    pub scales: Vec<ScaleChange>,
    pub feature_gates: crate::controller::features::FeatureGates,
    /// How both sides' controllers treat preferences.
    pub preferences: crate::scheduling::Preferences,
    /// Reservation id -> how many instances it holds (`--reservation`),
    /// for reservations the snapshot's node classes hold.
    pub reservations: BTreeMap<String, u32>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            window: Duration::from_secs(24 * 3600),
            catalog: None,
            launch_delay: DEFAULT_LAUNCH_DELAY,
            scales: Vec::new(),
            feature_gates: Default::default(),
            preferences: Default::default(),
            reservations: BTreeMap::new(),
        }
    }
}

/// One side: a name for the output and its configuration (validated
/// EC2NodeClasses and NodePools, in the order they are applied).
#[derive(Debug, Clone)]
pub struct Side {
    pub label: String,
    pub config: Vec<Manifest>,
}

impl Side {
    /// A side of `config`. Objects read from a live cluster come with what
    /// the API server set (uid, resourceVersion, status, ...): they are
    /// applied as new objects, so that goes. (The snapshot's objects, by
    /// contrast, are restored with theirs: see `strip_server_fields`.)
    pub fn new(label: String, mut config: Vec<Manifest>) -> Side {
        for m in &mut config {
            if let Some(o) = m.object.as_object_mut() {
                o.remove("status");
                if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                    for field in [
                        "resourceVersion",
                        "uid",
                        "creationTimestamp",
                        "generation",
                        "managedFields",
                        "deletionTimestamp",
                        "finalizers",
                    ] {
                        meta.remove(field);
                    }
                }
            }
        }
        Side { label, config }
    }
}

/// A snapshot made ready to start simulations from.
#[derive(Debug, Clone)]
pub struct Start {
    pub file: String,
    pub start: Timestamp,
    pub kubernetes_version: String,
    pub region: String,
    pub zones: Vec<String>,
    pub initial: std::sync::Arc<[Manifest]>,
    pub observed: Vec<ObservedAlias>,
    /// What was assumed about the snapshot, for the output.
    pub notes: Vec<String>,
    /// Counts of what the snapshot holds, for the output.
    pub nodes: usize,
    pub pods: usize,
    /// The instance ids of the snapshot's Nodes and NodeClaims (from their
    /// provider ids) and the names of its NodeClaims: what was running or
    /// requested before the window, as opposed to what it launches. Not
    /// Node names: an instance launched in the window may get the private
    /// address, and so the name, of one the window terminated.
    pub initial_instances: BTreeSet<String>,
    pub initial_claims: BTreeSet<String>,
    /// `namespace/name` of its pods no controller recreates.
    pub bare_pods: BTreeSet<String>,
    /// The capacity reservations the snapshot's EC2NodeClasses hold (their
    /// status), each as many instances as the snapshot has nodes in it
    /// unless [`Settings::reservations`] says how many it holds.
    pub reservations: Vec<super::scenario::ReservationSpec>,
}

/// The reservations `classes` list in their status, at `start`: each
/// selected by its class's terms in the simulated EC2 (it carries the tags
/// those terms ask for and the owner the status names), holding as many
/// instances as `nodes` are labelled with it. Ended ones are left out.
fn snapshot_reservations(
    classes: &[&Value],
    nodes: &[&Value],
    start: Timestamp,
) -> Vec<super::scenario::ReservationSpec> {
    let mut out: Vec<super::scenario::ReservationSpec> = Vec::new();
    for c in classes {
        let mut tags = std::collections::BTreeMap::new();
        for t in c
            .pointer("/spec/capacityReservationSelectorTerms")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for (k, v) in t
                .get("tags")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                tags.insert(k.clone(), v.as_str().unwrap_or("*").to_string());
            }
        }
        for r in c
            .pointer("/status/capacityReservations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let (Some(id), Some(instance_type), Some(zone)) = (
                str_at(r, "/id"),
                str_at(r, "/instanceType"),
                str_at(r, "/availabilityZone"),
            ) else {
                continue;
            };
            if out.iter().any(|o| o.id == id) {
                continue;
            }
            let until = match str_at(r, "/endTime").map(parse_rfc3339) {
                Some(Ok(end)) if end <= start => continue,
                Some(Ok(end)) => {
                    Some(Duration::try_from(end.duration_since(start)).unwrap_or_default())
                }
                _ => None,
            };
            let in_use = nodes
                .iter()
                .filter(|n| {
                    str_at(
                        n,
                        "/metadata/labels/karpenter.k8s.aws~1capacity-reservation-id",
                    ) == Some(id)
                })
                .count();
            out.push(super::scenario::ReservationSpec {
                id: id.to_string(),
                instance_type: instance_type.to_string(),
                zone: zone.to_string(),
                count: u32::try_from(in_use).unwrap_or(u32::MAX),
                capacity_block: str_at(r, "/reservationType") == Some("capacity-block"),
                instance_match_criteria: str_at(r, "/instanceMatchCriteria")
                    .unwrap_or("targeted")
                    .to_string(),
                tags: tags.clone(),
                owner_id: str_at(r, "/ownerID").map(str::to_string),
                from: Duration::ZERO,
                until,
            });
        }
    }
    out
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// The latest time the snapshot records: creation and deletion times,
/// conditions' transitions, pods' start times.
fn latest_time(objects: &[Located]) -> Option<Timestamp> {
    let mut latest: Option<Timestamp> = None;
    let mut see = |s: Option<&str>| {
        if let Some(t) = s.and_then(|s| parse_rfc3339(s).ok()) {
            latest = Some(latest.map_or(t, |l| l.max(t)));
        }
    };
    for o in objects {
        let v = &o.object;
        see(str_at(v, "/metadata/creationTimestamp"));
        see(str_at(v, "/metadata/deletionTimestamp"));
        see(str_at(v, "/status/startTime"));
        for c in v
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            see(str_at(c, "/lastTransitionTime"));
            see(str_at(c, "/lastHeartbeatTime"));
        }
    }
    latest
}

/// `v1.34.2-eks-113cf36` -> `1.34`.
fn minor_version(kubelet: &str) -> Option<(u32, u32)> {
    let v = kubelet.trim_start_matches('v');
    let mut parts = v.split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// `v20251201` in an image name (the release of an EKS-optimized AMI, as
/// AWS and the simulated EC2 name them).
fn release_in(name: &str) -> Option<String> {
    name.split(['-', '_', '.'])
        .find(|p| p.len() == 9 && p.starts_with('v') && p[1..].bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_string)
}

/// The region of a zone: `us-east-1a` -> `us-east-1`.
fn region_of(zone: &str) -> &str {
    zone.trim_end_matches(|c: char| c.is_ascii_lowercase())
}

/// What each alias of the live EC2NodeClasses resolved to: a class with
/// one alias term whose status lists its images.
fn observed_aliases(classes: &[&Value]) -> Vec<ObservedAlias> {
    let mut out: Vec<ObservedAlias> = Vec::new();
    for c in classes {
        let terms = c
            .pointer("/spec/amiSelectorTerms")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let [term] = terms else { continue };
        let Some(alias) = str_at(term, "/alias") else {
            continue;
        };
        let amis: Vec<Ami> = c
            .pointer("/status/amis")
            .cloned()
            .and_then(|a| serde_json::from_value(a).ok())
            .unwrap_or_default();
        if amis.is_empty() || out.iter().any(|o| o.alias == alias) {
            continue;
        }
        let releases: BTreeSet<String> = amis
            .iter()
            .filter_map(|a| a.name.as_deref().and_then(release_in))
            .collect();
        let release = (releases.len() == 1)
            .then(|| releases.into_iter().next())
            .flatten();
        out.push(ObservedAlias {
            alias: alias.to_string(),
            release,
            amis,
        });
    }
    out
}

/// The controlling owner reference of an object.
fn controller_of(v: &Value) -> Option<&Value> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
}

/// A pod's spec as a template: without the node it was bound to, the
/// node affinity a DaemonSet controller pins it with, and its status.
fn template_of(pod: &Value) -> Value {
    let mut spec = pod.get("spec").cloned().unwrap_or_else(|| json!({}));
    if let Some(s) = spec.as_object_mut() {
        s.remove("nodeName");
    }
    let meta = pod.get("metadata");
    let mut labels = meta
        .and_then(|m| m.get("labels"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    // Labels the StatefulSet controller sets per pod.
    if let Some(l) = labels.as_object_mut() {
        l.remove("statefulset.kubernetes.io/pod-name");
        l.remove("apps.kubernetes.io/pod-index");
    }
    let mut template = json!({"metadata": {"labels": labels}, "spec": spec});
    if let Some(a) = meta.and_then(|m| m.get("annotations")) {
        template["metadata"]["annotations"] = a.clone();
    }
    template
}

/// An owner rebuilt from the pods that name it.
fn rebuilt_owner(kind: &str, namespace: &str, name: &str, uid: &str, pods: &[&Value]) -> Value {
    let first = pods[0];
    let template = template_of(first);
    let live = pods
        .iter()
        .filter(|p| !crate::api::pod::is_finished_phase(str_at(p, "/status/phase")))
        .count();
    let labels = template["metadata"]["labels"].clone();
    let meta = json!({"name": name, "namespace": namespace, "uid": uid, "labels": labels.clone()});
    match kind {
        "ReplicaSet" => json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta,
            "spec": {"replicas": live, "selector": {"matchLabels": labels}, "template": template},
        }),
        "StatefulSet" => {
            // Ordinals name the pods; claims named TEMPLATE-NAME-ORDINAL
            // come back as volume claim templates.
            let ordinals = pods.iter().filter_map(|p| {
                str_at(p, "/metadata/name")?
                    .strip_prefix(name)?
                    .strip_prefix('-')?
                    .parse::<u64>()
                    .ok()
            });
            let replicas = ordinals.max().map_or(live as u64, |m| m + 1);
            let pod_name = str_at(first, "/metadata/name").unwrap_or_default();
            let mut template = template;
            let mut claims = Vec::new();
            if let Some(volumes) = template
                .pointer_mut("/spec/volumes")
                .and_then(Value::as_array_mut)
            {
                volumes.retain(|v| {
                    let claim = str_at(v, "/persistentVolumeClaim/claimName");
                    let vol = str_at(v, "/name").unwrap_or_default();
                    match claim {
                        Some(c) if c == format!("{vol}-{pod_name}") => {
                            claims.push(json!({"metadata": {"name": vol}, "spec": {}}));
                            false
                        }
                        _ => true,
                    }
                });
            }
            json!({
                "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
                "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                    "serviceName": name, "template": template, "volumeClaimTemplates": claims},
            })
        }
        _ => {
            let mut template = template;
            template["spec"]["restartPolicy"] = json!("Never");
            json!({
                "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                "spec": {"completions": pods.len(), "parallelism": live.max(1), "template": template},
            })
        }
    }
}

/// Makes a snapshot ready to start forecasts from (see the module's
/// documentation). `file` names it in messages.
pub fn prepare(file: &str, objects: Vec<Located>) -> Result<Start, ForecastError> {
    let start = latest_time(&objects)
        .map(|t| {
            // Whole seconds, after everything the snapshot records.
            let s = t.as_second() + i64::from(t.subsec_nanosecond() > 0);
            Timestamp::from_second(s).unwrap_or(t)
        })
        .or_else(|| parse_rfc3339(super::scenario::DEFAULT_START).ok())
        .ok_or_else(|| ForecastError::Setup("no start time".into()))?;
    let mut notes = Vec::new();
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    let mut terminating = 0;
    let mut classes = Vec::new();
    let mut kept: Vec<Located> = Vec::new();
    for mut o in objects {
        let kind = str_at(&o.object, "/kind").unwrap_or_default();
        if !restored(kind) {
            *skipped.entry(kind.to_string()).or_default() += 1;
            continue;
        }
        if kind == "EC2NodeClass" {
            classes.push(o.object);
            continue;
        }
        if kind == "Pod" && o.object.pointer("/metadata/deletionTimestamp").is_some() {
            terminating += 1;
            continue;
        }
        strip_server_fields(&mut o.object);
        kept.push(o);
    }
    skipped.remove("NodePool");
    if !skipped.is_empty() {
        notes.push(format!(
            "objects of kinds a forecast does not use were left out: {}",
            skipped
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if terminating > 0 {
        notes.push(format!(
            "{terminating} pod(s) terminating in the snapshot are taken as gone"
        ));
    }

    // Owners that pods (and ReplicaSets) name but the snapshot lacks.
    let present: BTreeSet<&str> = kept
        .iter()
        .filter_map(|o| str_at(&o.object, "/metadata/uid"))
        .collect();
    let mut orphans: BTreeMap<(String, String, String, String), Vec<&Value>> = BTreeMap::new();
    let mut daemonless = 0;
    for o in &kept {
        if str_at(&o.object, "/kind") != Some("Pod") {
            continue;
        }
        let Some(owner) = controller_of(&o.object) else {
            continue;
        };
        let (Some(kind), Some(name), Some(uid)) = (
            str_at(owner, "/kind"),
            str_at(owner, "/name"),
            str_at(owner, "/uid"),
        ) else {
            continue;
        };
        if present.contains(uid) {
            continue;
        }
        match kind {
            "ReplicaSet" | "StatefulSet" | "Job" => {
                let ns = str_at(&o.object, "/metadata/namespace").unwrap_or("default");
                orphans
                    .entry((kind.into(), ns.into(), name.into(), uid.into()))
                    .or_default()
                    .push(&o.object);
            }
            "DaemonSet" => daemonless += 1,
            _ => {}
        }
    }
    let mut rebuilt = Vec::new();
    if !orphans.is_empty() {
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for ((kind, ns, name, uid), pods) in &orphans {
            *by_kind.entry(kind.as_str()).or_default() += 1;
            rebuilt.push(Manifest {
                object: rebuilt_owner(kind, ns, name, uid, pods),
                file: file.to_string(),
                pos: Pos::default(),
            });
        }
        notes.push(format!(
            "owners missing from the snapshot were rebuilt from their pods (replicas as running, template from a pod): {}",
            by_kind
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if daemonless > 0 {
        notes.push(format!(
            "{daemonless} DaemonSet pod(s) name a DaemonSet the snapshot lacks: new nodes run no such pod"
        ));
    }

    let classes: Vec<&Value> = classes.iter().collect();
    let nodes: Vec<&Value> = kept
        .iter()
        .map(|o| &o.object)
        .filter(|v| str_at(v, "/kind") == Some("Node"))
        .collect();
    let kubernetes_version = nodes
        .iter()
        .filter_map(|n| minor_version(str_at(n, "/status/nodeInfo/kubeletVersion")?))
        .max()
        .map_or_else(
            || DEFAULT_KUBERNETES_VERSION.to_string(),
            |(major, minor)| format!("{major}.{minor}"),
        );
    let mut zones: BTreeSet<String> = nodes
        .iter()
        .filter_map(|n| str_at(n, "/metadata/labels/topology.kubernetes.io~1zone"))
        .map(str::to_string)
        .collect();
    for c in &classes {
        for s in c
            .pointer("/status/subnets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(z) = str_at(s, "/zone") {
                zones.insert(z.to_string());
            }
        }
    }
    let region = zones
        .iter()
        .next()
        .map_or(DEFAULT_REGION, |z| region_of(z))
        .to_string();
    zones.retain(|z| region_of(z) == region);
    let zones: Vec<String> = if zones.is_empty() {
        default_zones(&region)
    } else {
        zones.into_iter().collect()
    };
    let pods = kept
        .iter()
        .filter(|o| str_at(&o.object, "/kind") == Some("Pod"))
        .count();
    let instance_id = |provider_id: &str| {
        ProviderIds::Aws
            .parse(provider_id)
            .or_else(|| ProviderIds::Kwok.parse(provider_id))
            .map(str::to_string)
    };
    let initial_instances = kept
        .iter()
        .filter_map(|o| match str_at(&o.object, "/kind")? {
            "Node" => str_at(&o.object, "/spec/providerID"),
            "NodeClaim" => str_at(&o.object, "/status/providerID"),
            _ => None,
        })
        .filter_map(instance_id)
        .collect();
    let initial_claims = kept
        .iter()
        .filter(|o| str_at(&o.object, "/kind") == Some("NodeClaim"))
        .filter_map(|o| str_at(&o.object, "/metadata/name"))
        .map(str::to_string)
        .collect();
    let bare_pods = kept
        .iter()
        .filter(|o| str_at(&o.object, "/kind") == Some("Pod"))
        .filter(|o| {
            controller_of(&o.object).is_none_or(|c| {
                // A Deployment owns pods itself only in a simulated
                // cluster's snapshot, whose Deployment controller keeps them.
                !matches!(
                    str_at(c, "/kind"),
                    Some("Deployment" | "ReplicaSet" | "StatefulSet" | "Job" | "DaemonSet")
                )
            })
        })
        .filter_map(|o| {
            Some(format!(
                "{}/{}",
                str_at(&o.object, "/metadata/namespace").unwrap_or("default"),
                str_at(&o.object, "/metadata/name")?
            ))
        })
        .collect();
    let reservations = snapshot_reservations(&classes, &nodes, start);
    let nodes = nodes.len();
    let observed = observed_aliases(&classes);
    let initial: Vec<Manifest> = kept
        .into_iter()
        .map(|o| Manifest {
            object: o.object,
            file: file.to_string(),
            pos: Pos {
                line: u32::try_from(o.line).unwrap_or(u32::MAX),
                column: 1,
            },
        })
        .chain(rebuilt)
        .collect();
    Ok(Start {
        file: file.to_string(),
        start,
        kubernetes_version,
        region,
        zones,
        initial: initial.into(),
        observed,
        notes,
        nodes,
        pods,
        initial_instances,
        initial_claims,
        bare_pods,
        reservations,
    })
}

/// Drops what the API server sets and a restore replaces.
fn strip_server_fields(v: &mut Value) {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
        meta.remove("selfLink");
    }
}

impl Start {
    /// Whether the instance `instance_id` of NodeClaim `nodeclaim` was
    /// running or requested before the window.
    fn was_running(&self, instance_id: &str, nodeclaim: &str) -> bool {
        self.initial_instances.contains(instance_id) || self.initial_claims.contains(nodeclaim)
    }

    /// The scenario of one side.
    fn scenario(&self, settings: &Settings) -> Scenario {
        Scenario {
            file: self.file.clone(),
            start: self.start,
            config: PathBuf::new(),
            config_pos: Pos::default(),
            catalog: settings.catalog.clone(),
            region: self.region.clone(),
            zones: self.zones.clone(),
            zones_pos: Pos::default(),
            initial: self.initial.clone(),
            cloud: CloudSettings {
                launch_delay: settings.launch_delay,
                kubernetes_version: self.kubernetes_version.clone(),
                observed_aliases: self.observed.clone(),
                reservations: self
                    .reservations
                    .iter()
                    .map(|r| {
                        let mut r = r.clone();
                        if let Some(count) = settings.reservations.get(&r.id) {
                            r.count = *count;
                        }
                        r
                    })
                    .filter(|r| r.count > 0)
                    .collect(),
                ..CloudSettings::default()
            },
            pods: Default::default(),
            feature_gates: settings.feature_gates,
            launch_concurrency: crate::controller::LAUNCH_CONCURRENCY,
            preferences: settings.preferences,
            steps: settings
                .scales
                .iter()
                .map(|s| Step {
                    at: s.at,
                    pos: Pos::default(),
                    action: Action::Scale {
                        namespace: s.namespace.clone(),
                        name: s.name.clone(),
                        replicas: s.replicas,
                    },
                })
                .collect(),
            until: settings.window,
            faults: Vec::new(),
        }
    }
}

/// Both sides' forecast and their whole reports (as `simulate` writes them).
pub struct Run {
    pub forecast: Forecast,
    pub a: Report,
    pub b: Report,
}

/// Runs both sides, in parallel, and compares them.
pub fn run(start: &Start, settings: &Settings, a: Side, b: Side) -> Result<Run, ForecastError> {
    for s in &settings.scales {
        if s.at > settings.window {
            return Err(ForecastError::Scale(format!(
                "deployment/{}/{}: at {} is after the window's end ({})",
                s.namespace,
                s.name,
                super::scenario::human(s.at),
                super::scenario::human(settings.window)
            )));
        }
        let exists = start.initial.iter().any(|m| {
            m.kind() == "Deployment"
                && str_at(&m.object, "/metadata/namespace").unwrap_or("default") == s.namespace
                && str_at(&m.object, "/metadata/name") == Some(s.name.as_str())
        });
        if !exists {
            return Err(ForecastError::Scale(format!(
                "deployment/{}/{}: the snapshot has no such Deployment (`dovetail snapshot` lists them)",
                s.namespace, s.name
            )));
        }
    }
    let scenario = start.scenario(settings);
    let run_side = |side: &Side| -> Result<Report, ForecastError> {
        Simulation::with_config(scenario.clone(), None, side.config.clone())
            .and_then(|sim| sim.run(None))
            .map_err(|source| ForecastError::Simulation {
                side: side.label.clone(),
                source,
            })
    };
    let (ra, rb) = std::thread::scope(|scope| {
        let other = scope.spawn(|| run_side(&b));
        let ra = run_side(&a);
        let rb = other
            .join()
            .unwrap_or_else(|_| Err(ForecastError::Setup("the forecast of B panicked".into())));
        (ra, rb)
    });
    let (ra, rb) = (ra?, rb?);
    let mut assumptions = vec![
        format!(
            "prices from the {} catalog, on-demand and spot, as they are for the whole window",
            if settings.catalog.is_some() {
                "given"
            } else {
                "built-in (us-east-1)"
            }
        ),
        format!(
            "{} from launch to a Ready node",
            super::scenario::human(settings.launch_delay)
        ),
        "no traffic-driven scaling: workloads keep their replicas unless --scale changes them; pods owned by a ReplicaSet, StatefulSet, Job or DaemonSet are recreated when evicted, bare pods are not".to_string(),
        format!(
            "the cluster's Kubernetes version {}, region {}, zones {}",
            start.kubernetes_version,
            start.region,
            start.zones.join(", ")
        ),
    ];
    assumptions.extend(start.notes.iter().cloned());
    let forecast = Forecast {
        snapshot: start.file.clone(),
        start: format_rfc3339(start.start),
        window_seconds: settings.window.as_secs_f64(),
        nodes: start.nodes,
        pods: start.pods,
        scales: settings.scales.clone(),
        assumptions,
        reports: None,
        a: Outcome::of(&a.label, &ra, start, &scenario.cloud.reservations),
        b: Outcome::of(&b.label, &rb, start, &scenario.cloud.reservations),
    };
    Ok(Run {
        forecast,
        a: ra,
        b: rb,
    })
}

/// Two sides of a forecast.
#[derive(Debug, Clone, Serialize)]
pub struct Forecast {
    pub snapshot: String,
    pub start: String,
    pub window_seconds: f64,
    /// Nodes and pods of the snapshot.
    pub nodes: usize,
    pub pods: usize,
    pub scales: Vec<ScaleChange>,
    pub assumptions: Vec<String>,
    /// Where each side's whole report and the overlaid charts were written
    /// (`--forecast-reports`), for the output to point at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reports: Option<String>,
    pub a: Outcome,
    pub b: Outcome,
}

/// How a side used one capacity reservation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReservationUse {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    /// The instances it holds.
    pub instances: u32,
    /// Its nodes alive at the end.
    pub in_use_at_end: usize,
    /// Seconds from the start until every instance was in use (0: it was
    /// at the start), if it was.
    pub used_up_after_seconds: Option<f64>,
}

/// Disrupted nodes of one reason and NodePool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Disrupted {
    pub reason: String,
    pub nodepool: String,
    pub nodes: usize,
}

/// Pending pods at the end with one reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unschedulable {
    pub reason: String,
    pub pods: usize,
    /// Up to five, by name.
    pub examples: Vec<String>,
}

/// A limit that kept pods from launching.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitReached {
    pub nodepool: String,
    pub limit: String,
    pub pods: usize,
}

/// A PodDisruptionBudget that refused evictions of a drain.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockedDrain {
    pub budget: String,
    pub evictions_refused: usize,
    pub nodes: usize,
}

/// Nodes a disruption wants but may not take at the end of the window
/// (as the controller's last pass found them), or took but cannot drain,
/// with what blocks them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockedNodes {
    pub reason: String,
    pub blocker: String,
    pub nodes: Vec<String>,
}

/// What one side's run came to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub label: String,
    pub price_per_hour: f64,
    pub lower_bound_price_per_hour: Option<f64>,
    pub cost_usd: f64,
    pub nodes_at_end: usize,
    pub nodes_launched: usize,
    pub nodes_terminated: usize,
    pub disruptions: Vec<Disrupted>,
    /// Seconds from the start until the last drifted node is gone.
    pub last_drift_replaced_seconds: Option<f64>,
    /// Nodes whose drift replacement had started but not finished when
    /// the window ended (more may wait their turn).
    pub drift_in_progress: usize,
    pub pods_waited: usize,
    pub p50_pending_seconds: f64,
    pub p99_pending_seconds: f64,
    pub max_pending_seconds: f64,
    pub pods_pending_at_end: usize,
    /// Pods no controller recreates (bare pods) that were evicted or
    /// deleted, by `namespace/name`.
    pub bare_pods_lost: Vec<String>,
    pub unschedulable: Vec<Unschedulable>,
    pub limits_reached: Vec<LimitReached>,
    pub blocked_drains: Vec<BlockedDrain>,
    /// Drifted or underutilized nodes still blocked at the end, grouped by
    /// blocker.
    pub blocked: Vec<BlockedNodes>,
    /// The capacity reservations the snapshot's node classes hold.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<ReservationUse>,
}

/// How `r` used each of `reservations`: its nodes over time, from the
/// report's node records.
fn reservation_uses(
    r: &Report,
    reservations: &[super::scenario::ReservationSpec],
) -> Vec<ReservationUse> {
    let start = parse_rfc3339(&r.start).ok();
    reservations
        .iter()
        .map(|spec| {
            // (time, +1 launched / -1 deleted), in time order.
            let mut changes: Vec<(Timestamp, i64)> = Vec::new();
            for n in r
                .nodes
                .iter()
                .filter(|n| n.reservation.as_deref() == Some(spec.id.as_str()))
            {
                let (launched, deleted) = n.lifetime();
                if let Some(t) = launched {
                    changes.push((t, 1));
                }
                if let Some(t) = deleted {
                    changes.push((t, -1));
                }
            }
            changes.sort();
            let mut live = 0;
            let mut used_up = None;
            for (t, d) in &changes {
                live += d;
                if used_up.is_none() && live >= i64::from(spec.count) {
                    used_up = start.map(|s| t.duration_since(s).as_secs_f64().max(0.0));
                }
            }
            ReservationUse {
                id: spec.id.clone(),
                instance_type: spec.instance_type.clone(),
                zone: spec.zone.clone(),
                instances: spec.count,
                in_use_at_end: usize::try_from(live.max(0)).unwrap_or(0),
                used_up_after_seconds: used_up,
            }
        })
        .collect()
}

/// `NodePool general would exceed limit cpu=10: ...` -> (general, cpu=10),
/// for each pool a reason names.
fn limits_in(reason: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = reason;
    while let Some(i) = rest.find("NodePool ") {
        rest = &rest[i + "NodePool ".len()..];
        let Some((pool, after)) = rest.split_once(' ') else {
            break;
        };
        if let Some(limit) = after.strip_prefix("would exceed limit ") {
            let end = limit.find(':').unwrap_or(limit.len());
            out.push((pool.to_string(), limit[..end].trim().to_string()));
        }
    }
    out
}

impl Outcome {
    fn of(
        label: &str,
        r: &Report,
        initial: &Start,
        reservations: &[super::scenario::ReservationSpec],
    ) -> Outcome {
        let start = parse_rfc3339(&r.start).ok();
        let offset = |t: &str| -> Option<f64> {
            let t = parse_rfc3339(t).ok()?;
            Some(t.duration_since(start?).as_secs_f64())
        };
        // Each decision carried out, per NodeClaim it disrupted.
        let by_claim: BTreeMap<&str, &super::report::NodeRecord> =
            r.nodes.iter().map(|n| (n.nodeclaim.as_str(), n)).collect();
        let mut disrupted: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut last_drift: Option<f64> = None;
        let mut drift_in_progress = 0;
        let mut seen = BTreeSet::new();
        for d in &r.disruptions {
            for claim in &d.nodeclaims {
                if !seen.insert(claim.as_str()) {
                    continue;
                }
                let node = by_claim.get(claim.as_str());
                let pool = node.map_or_else(String::new, |n| n.nodepool.clone());
                *disrupted.entry((d.reason.clone(), pool)).or_default() += 1;
                if d.reason == "Drifted" {
                    match node.and_then(|n| n.deleted_at.as_deref()).and_then(offset) {
                        Some(gone) => {
                            last_drift = Some(last_drift.map_or(gone, |l: f64| l.max(gone)));
                        }
                        None => drift_in_progress += 1,
                    }
                }
            }
        }
        let mut unschedulable: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut limits: BTreeMap<(String, String), usize> = BTreeMap::new();
        for u in &r.unschedulable {
            unschedulable
                .entry(u.reason.as_str())
                .or_default()
                .push(u.pod.as_str());
            for key in limits_in(&u.reason) {
                *limits.entry(key).or_default() += 1;
            }
        }
        let mut blocked: BTreeMap<String, (usize, BTreeSet<&str>)> = BTreeMap::new();
        for e in r.events.iter().filter(|e| e.reason == "EvictionBlocked") {
            let ns = e
                .message
                .strip_prefix("pod ")
                .and_then(|m| m.split_once('/'))
                .map_or("default", |(ns, _)| ns);
            let budget = e
                .message
                .split_once("disruption budget ")
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .map_or_else(|| "(unnamed)".to_string(), |b| format!("{ns}/{b}"));
            let entry = blocked.entry(budget).or_default();
            entry.0 += 1;
            entry.1.insert(e.object.as_str());
        }
        // What the controller's last disruption pass found blocked, and the
        // disrupted nodes still there whose drain a budget holds (expired
        // nodes are deleted outright: a PodDisruptionBudget holds their
        // drain until their terminationGracePeriod, if any).
        let mut blocked_nodes: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for b in &r.blocked {
            blocked_nodes
                .entry((b.reason.as_str().to_string(), b.blocker.clone()))
                .or_default()
                .push(b.node.clone());
        }
        let disrupted_reason: BTreeMap<&str, &str> = r
            .disruptions
            .iter()
            .flat_map(|d| d.nodeclaims.iter().map(|c| (c.as_str(), d.reason.as_str())))
            .collect();
        for (budget, (_, claims)) in &blocked {
            for object in claims {
                let Some(claim) = object.strip_prefix("NodeClaim/") else {
                    continue;
                };
                let (Some(reason), Some(node)) = (
                    disrupted_reason.get(claim),
                    by_claim.get(claim).filter(|n| n.deleted_at.is_none()),
                ) else {
                    continue;
                };
                blocked_nodes
                    .entry((
                        reason.to_string(),
                        format!("its drain is held by PodDisruptionBudget {budget}"),
                    ))
                    .or_default()
                    .push(node.name.clone());
            }
        }
        let s = &r.summary;
        Outcome {
            label: label.to_string(),
            price_per_hour: s.price_per_hour,
            lower_bound_price_per_hour: s.lower_bound_price_per_hour,
            cost_usd: s.cost_usd,
            nodes_at_end: r.nodes.iter().filter(|n| n.deleted_at.is_none()).count(),
            nodes_launched: r
                .nodes
                .iter()
                .filter(|n| !initial.was_running(&n.instance_id, &n.nodeclaim))
                .count(),
            nodes_terminated: r.nodes.iter().filter(|n| n.deleted_at.is_some()).count(),
            disruptions: disrupted
                .into_iter()
                .map(|((reason, nodepool), nodes)| Disrupted {
                    reason,
                    nodepool,
                    nodes,
                })
                .collect(),
            last_drift_replaced_seconds: last_drift,
            drift_in_progress,
            pods_waited: r.pods.iter().filter(|p| p.pending_seconds > 0.0).count(),
            p50_pending_seconds: s.p50_pending_seconds,
            p99_pending_seconds: s.p99_pending_seconds,
            max_pending_seconds: s.max_pending_seconds,
            pods_pending_at_end: s.pods_pending,
            bare_pods_lost: r
                .pods
                .iter()
                .filter(|p| p.deleted_at.is_some())
                .map(|p| format!("{}/{}", p.namespace, p.name))
                .filter(|k| initial.bare_pods.contains(k))
                .collect(),
            unschedulable: unschedulable
                .into_iter()
                .map(|(reason, pods)| Unschedulable {
                    reason: reason.to_string(),
                    pods: pods.len(),
                    examples: pods.iter().take(5).map(|p| p.to_string()).collect(),
                })
                .collect(),
            limits_reached: limits
                .into_iter()
                .map(|((nodepool, limit), pods)| LimitReached {
                    nodepool,
                    limit,
                    pods,
                })
                .collect(),
            blocked_drains: blocked
                .into_iter()
                .map(|(budget, (evictions_refused, nodes))| BlockedDrain {
                    budget,
                    evictions_refused,
                    nodes: nodes.len(),
                })
                .collect(),
            blocked: blocked_nodes
                .into_iter()
                .map(|((reason, blocker), mut nodes)| {
                    nodes.sort();
                    nodes.dedup();
                    BlockedNodes {
                        reason,
                        blocker,
                        nodes,
                    }
                })
                .collect(),
            reservations: reservation_uses(r, reservations),
        }
    }

    /// The outcome without its label, to compare two sides.
    fn unlabelled(&self) -> Outcome {
        Outcome {
            label: String::new(),
            ..self.clone()
        }
    }
}

/// One row of the side-by-side table: a figure of A and B, and whether
/// more is worse.
struct Row {
    name: &'static str,
    a: f64,
    b: f64,
    /// How to show a value.
    show: fn(f64) -> String,
    /// Whether a higher value is worse (cost, waiting), or a lower one.
    higher_is_worse: bool,
}

fn dollars(v: f64) -> String {
    format!("${v:.2}")
}
fn dollars_per_hour(v: f64) -> String {
    format!("${v:.3}/h")
}
fn count(v: f64) -> String {
    format!("{v:.0}")
}
fn duration(v: f64) -> String {
    if v <= 0.0 {
        return "0s".into();
    }
    super::scenario::human(Duration::from_secs_f64(v))
}

impl Forecast {
    /// Whether the two sides forecast anything different.
    pub fn differs(&self) -> bool {
        self.a.unlabelled() != self.b.unlabelled()
    }

    fn rows(&self) -> Vec<Row> {
        let (a, b) = (&self.a, &self.b);
        let n = |v: usize| v as f64;
        vec![
            Row {
                name: "price per hour at the end",
                a: a.price_per_hour,
                b: b.price_per_hour,
                show: dollars_per_hour,
                higher_is_worse: true,
            },
            Row {
                name: "lower bound per hour at the end",
                a: a.lower_bound_price_per_hour.unwrap_or(0.0),
                b: b.lower_bound_price_per_hour.unwrap_or(0.0),
                show: dollars_per_hour,
                higher_is_worse: true,
            },
            Row {
                name: "cost over the window",
                a: a.cost_usd,
                b: b.cost_usd,
                show: dollars,
                higher_is_worse: true,
            },
            Row {
                name: "nodes at the end",
                a: n(a.nodes_at_end),
                b: n(b.nodes_at_end),
                show: count,
                higher_is_worse: true,
            },
            Row {
                name: "nodes launched",
                a: n(a.nodes_launched),
                b: n(b.nodes_launched),
                show: count,
                higher_is_worse: true,
            },
            Row {
                name: "nodes terminated",
                a: n(a.nodes_terminated),
                b: n(b.nodes_terminated),
                show: count,
                higher_is_worse: true,
            },
            Row {
                name: "nodes disrupted",
                a: n(a.disruptions.iter().map(|d| d.nodes).sum()),
                b: n(b.disruptions.iter().map(|d| d.nodes).sum()),
                show: count,
                higher_is_worse: true,
            },
            Row {
                name: "last drift replacement done after",
                a: a.last_drift_replaced_seconds.unwrap_or(0.0),
                b: b.last_drift_replaced_seconds.unwrap_or(0.0),
                show: duration,
                higher_is_worse: true,
            },
            Row {
                name: "pods that waited",
                a: n(a.pods_waited),
                b: n(b.pods_waited),
                show: count,
                higher_is_worse: true,
            },
            Row {
                name: "pod wait p50",
                a: a.p50_pending_seconds,
                b: b.p50_pending_seconds,
                show: duration,
                higher_is_worse: true,
            },
            Row {
                name: "pod wait p99",
                a: a.p99_pending_seconds,
                b: b.p99_pending_seconds,
                show: duration,
                higher_is_worse: true,
            },
            Row {
                name: "pod wait max",
                a: a.max_pending_seconds,
                b: b.max_pending_seconds,
                show: duration,
                higher_is_worse: true,
            },
            Row {
                name: "pods pending at the end",
                a: n(a.pods_pending_at_end),
                b: n(b.pods_pending_at_end),
                show: count,
                higher_is_worse: true,
            },
            Row {
                name: "bare pods evicted, not recreated",
                a: n(a.bare_pods_lost.len()),
                b: n(b.bare_pods_lost.len()),
                show: count,
                higher_is_worse: true,
            },
            Row {
                name: "nodes blocked from disruption",
                a: n(a.blocked.iter().map(|g| g.nodes.len()).sum()),
                b: n(b.blocked.iter().map(|g| g.nodes.len()).sum()),
                show: count,
                higher_is_worse: true,
            },
            Row {
                name: "evictions refused by a PDB",
                a: n(a.blocked_drains.iter().map(|d| d.evictions_refused).sum()),
                b: n(b.blocked_drains.iter().map(|d| d.evictions_refused).sum()),
                show: count,
                higher_is_worse: true,
            },
        ]
    }

    /// The window, as `24h`.
    fn window(&self) -> String {
        duration(self.window_seconds)
    }

    /// Markdown for a pull-request comment: the table of both sides and
    /// the change, bold where B is worse, then each side's details.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "\n### Forecast over {} from `{}` ({} nodes, {} pods at {})\n\n",
            self.window(),
            self.snapshot,
            self.nodes,
            self.pods,
            self.start
        );
        for s in &self.scales {
            let _ = writeln!(
                out,
                "- scaled: deployment/{}/{} to {} replicas at +{}",
                s.namespace,
                s.name,
                s.replicas,
                duration(s.at.as_secs_f64())
            );
        }
        if !self.scales.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "| | A: {} | B: {} | change |\n|---|---:|---:|---:|",
            md_escape(&self.a.label),
            md_escape(&self.b.label)
        );
        for r in self.rows() {
            let worse = if r.higher_is_worse {
                r.b > r.a
            } else {
                r.b < r.a
            };
            let delta = delta(&r);
            let (b, delta) = if worse && !delta.is_empty() {
                (format!("**{}**", (r.show)(r.b)), format!("**{delta}**"))
            } else {
                ((r.show)(r.b), delta)
            };
            let _ = writeln!(out, "| {} | {} | {b} | {delta} |", r.name, (r.show)(r.a));
        }
        for (name, o, other) in [("A", &self.a, &self.b), ("B", &self.b, &self.a)] {
            let details = details(o, other);
            if !details.is_empty() {
                let _ = write!(out, "\n**{name}: {}**\n\n{details}", md_escape(&o.label));
            }
        }
        if let Some(dir) = &self.reports {
            let _ = writeln!(
                out,
                "\nCharts: `{dir}/forecast.html` (both fleets overlaid); each side's whole report: `{dir}/a.html`, `{dir}/b.html`."
            );
        }
        out.push_str("\n<details><summary>Assumptions</summary>\n\n");
        for a in &self.assumptions {
            let _ = writeln!(out, "- {}", md_escape(a));
        }
        out.push_str("\n</details>\n");
        if !self.differs() {
            out.push_str("\nBoth sides forecast the same.\n");
        }
        out
    }

    /// Plain text for a terminal.
    pub fn text(&self) -> String {
        let mut out = format!(
            "\nforecast over {} from {} ({} nodes, {} pods at {})\n",
            self.window(),
            self.snapshot,
            self.nodes,
            self.pods,
            self.start
        );
        let _ = writeln!(out, "  A: {}\n  B: {}", self.a.label, self.b.label);
        for s in &self.scales {
            let _ = writeln!(
                out,
                "  scaled: deployment/{}/{} to {} replicas at +{}",
                s.namespace,
                s.name,
                s.replicas,
                duration(s.at.as_secs_f64())
            );
        }
        let rows = self.rows();
        let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "  {:<width$}  {:>14}  {:>14}  {:>14}",
            "", "A", "B", "change"
        );
        for r in &rows {
            let _ = writeln!(
                out,
                "  {:<width$}  {:>14}  {:>14}  {:>14}",
                r.name,
                (r.show)(r.a),
                (r.show)(r.b),
                delta(r)
            );
        }
        for (name, o, other) in [("A", &self.a, &self.b), ("B", &self.b, &self.a)] {
            let details = details(o, other);
            if !details.is_empty() {
                let _ = write!(out, "{name}:\n{details}");
            }
        }
        out.push_str("assumptions:\n");
        for a in &self.assumptions {
            let _ = writeln!(out, "  - {a}");
        }
        if !self.differs() {
            out.push_str("both sides forecast the same\n");
        }
        out
    }
}

/// `+$1.20`, `-3`, or empty when equal.
fn delta(r: &Row) -> String {
    let d = r.b - r.a;
    if d.abs() < 1e-9 {
        return String::new();
    }
    let sign = if d > 0.0 { "+" } else { "-" };
    format!("{sign}{}", (r.show)(d.abs()))
}

/// A side's disruptions, unschedulable pods, limits and blocked drains, as
/// a Markdown list (also read as text); its blocked disruptions where they
/// differ from the `other` side's.
fn details(o: &Outcome, other: &Outcome) -> String {
    let mut out = String::new();
    for u in &o.reservations {
        let _ = writeln!(
            out,
            "- capacity reservation {} ({} in {}): {} of {} instance(s) in use at the end{}",
            u.id,
            u.instance_type,
            u.zone,
            u.in_use_at_end,
            u.instances,
            match u.used_up_after_seconds {
                Some(0.0) => "; used up from the start".to_string(),
                Some(t) => format!("; used up after {}", duration(t)),
                None => String::new(),
            }
        );
    }
    for d in &o.disruptions {
        let _ = writeln!(
            out,
            "- {} node(s) of NodePool `{}` disrupted: {}",
            d.nodes, d.nodepool, d.reason
        );
    }
    if let Some(t) = o.last_drift_replaced_seconds {
        let _ = writeln!(out, "- the last drifted node is gone after {}", duration(t));
    }
    if o.drift_in_progress > 0 {
        let _ = writeln!(
            out,
            "- {} drifted node(s) still being replaced when the window ends: the drift outlasts it",
            o.drift_in_progress
        );
    }
    for l in &o.limits_reached {
        let _ = writeln!(
            out,
            "- NodePool `{}` reached its limit {}: {} pod(s) wait for it",
            l.nodepool, l.limit, l.pods
        );
    }
    for u in &o.unschedulable {
        let _ = writeln!(
            out,
            "- {} pod(s) pending at the end ({}): {}",
            u.pods,
            u.examples.join(", "),
            md_escape(&u.reason)
        );
    }
    if !o.bare_pods_lost.is_empty() {
        let _ = writeln!(
            out,
            "- bare pod(s) evicted and not recreated (no controller owns them): {}",
            o.bare_pods_lost.join(", ")
        );
    }
    for b in &o.blocked_drains {
        let _ = writeln!(
            out,
            "- PodDisruptionBudget `{}` refused {} eviction(s) on {} node(s)",
            b.budget, b.evictions_refused, b.nodes
        );
    }
    if o.blocked != other.blocked {
        for g in &o.blocked {
            let _ = writeln!(
                out,
                "- {} {} node(s) cannot be disrupted: {} ({})",
                g.nodes.len(),
                g.reason,
                md_escape(&g.blocker),
                g.nodes.join(", ")
            );
        }
    }
    out
}

/// Keeps a table cell a cell.
fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_changes_parse_with_offsets() {
        let s = ScaleChange::parse("deployment/shop/web=40@2h").unwrap();
        assert_eq!(
            (s.namespace.as_str(), s.name.as_str(), s.replicas, s.at),
            ("shop", "web", 40, Duration::from_secs(7200))
        );
        assert_eq!(
            ScaleChange::parse("deployment/a/b=3").unwrap().at,
            Duration::ZERO
        );
        for bad in [
            "deployment/web=3",
            "statefulset/a/b=3",
            "deployment/a/b=x",
            "deployment/a/b=3@soon",
            "deployment//b=3",
        ] {
            assert!(ScaleChange::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn versions_releases_and_regions_are_read_as_eks_names_them() {
        assert_eq!(minor_version("v1.34.2-eks-113cf36"), Some((1, 34)));
        assert_eq!(minor_version("garbage"), None);
        assert_eq!(
            release_in("amazon-eks-node-al2023-x86_64-standard-1.34-v20251201").as_deref(),
            Some("v20251201")
        );
        assert_eq!(
            release_in("al2023-standard-amd64-k8s1.34-v20260105").as_deref(),
            Some("v20260105")
        );
        assert_eq!(release_in("my-image"), None);
        assert_eq!(region_of("eu-west-1b"), "eu-west-1");
    }

    #[test]
    fn limits_are_read_from_every_pool_a_reason_names() {
        let r = "NodePool general would exceed limit cpu=10: 10 is counted (...); NodePool spot would exceed limit memory=1Ti: x";
        assert_eq!(
            limits_in(r),
            [
                ("general".to_string(), "cpu=10".to_string()),
                ("spot".to_string(), "memory=1Ti".to_string())
            ]
        );
        assert!(limits_in("no instance type fits").is_empty());
    }

    fn located(v: Value) -> Located {
        Located { line: 1, object: v }
    }

    #[test]
    fn missing_owners_are_rebuilt_from_their_pods() {
        let pod = |name: &str, owner: Value, phase: &str| {
            located(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "shop", "uid": format!("u-{name}"),
                    "creationTimestamp": "2026-03-02T10:00:00Z",
                    "labels": {"app": "x", "statefulset.kubernetes.io/pod-name": name},
                    "ownerReferences": [owner]},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{name}")}}]},
                "status": {"phase": phase, "startTime": "2026-03-02T10:00:05.5Z"}
            }))
        };
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8", "uid": "rs1", "controller": true});
        let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "ss1", "controller": true});
        let objects = vec![
            pod("web-5d8-a", rs.clone(), "Running"),
            pod("web-5d8-b", rs, "Running"),
            pod("db-0", sts.clone(), "Running"),
            pod("db-2", sts, "Running"),
            located(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}})),
        ];
        let start = prepare("snap.yaml", objects).unwrap();
        assert_eq!(format_rfc3339(start.start), "2026-03-02T10:00:06Z");
        let rebuilt: Vec<&Value> = start
            .initial
            .iter()
            .filter(|m| m.kind() != "Pod")
            .map(|m| &m.object)
            .collect();
        assert_eq!(rebuilt.len(), 2);
        let rs = rebuilt.iter().find(|v| v["kind"] == "ReplicaSet").unwrap();
        assert_eq!(rs["metadata"]["uid"], "rs1");
        assert_eq!(rs["spec"]["replicas"], 2);
        assert!(rs["spec"]["template"]["spec"].get("nodeName").is_none());
        let ss = rebuilt.iter().find(|v| v["kind"] == "StatefulSet").unwrap();
        assert_eq!(
            ss["spec"]["replicas"], 3,
            "ordinals 0 and 2: three replicas"
        );
        assert_eq!(
            ss["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
            "data"
        );
        assert_eq!(ss["spec"]["template"]["spec"]["volumes"], json!([]));
        assert!(
            ss["spec"]["template"]["metadata"]["labels"]
                .get("statefulset.kubernetes.io/pod-name")
                .is_none()
        );
        assert!(
            start.notes.iter().any(|n| n.contains("1 Service")),
            "{:?}",
            start.notes
        );
        assert!(
            start
                .notes
                .iter()
                .any(|n| n.contains("1 ReplicaSet, 1 StatefulSet"))
        );
    }

    #[test]
    fn what_ran_before_the_window_is_known_by_instance_not_node_name() {
        let claim = |name: &str, status: Value| {
            located(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "creationTimestamp": "2026-03-02T10:00:00Z"},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws",
                    "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
                "status": status
            }))
        };
        let objects = vec![
            located(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "ip-10-0-1-2.ec2.internal",
                    "creationTimestamp": "2026-03-02T10:00:00Z"},
                "spec": {"providerID": "aws:///us-east-1a/i-0old"}
            })),
            claim(
                "default-abcde",
                json!({"providerID": "aws:///us-east-1b/i-0claimed"}),
            ),
            claim("default-launching", json!({})),
        ];
        let start = prepare("snap.yaml", objects).unwrap();
        assert!(start.was_running("i-0old", ""));
        assert!(start.was_running("i-0claimed", "default-abcde"));
        assert!(
            start.was_running("i-0new", "default-launching"),
            "a NodeClaim the snapshot already requested"
        );
        // A replacement that got the terminated node's address and name is
        // still a launch.
        assert!(!start.was_running("i-0new", "default-fghij"));
    }

    #[test]
    fn live_aliases_are_kept_with_their_release() {
        let class = json!({
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}]},
            "status": {"amis": [
                {"id": "ami-1", "name": "amazon-eks-node-al2023-x86_64-standard-1.34-v20251120", "requirements": []},
                {"id": "ami-2", "name": "amazon-eks-node-al2023-arm64-standard-1.34-v20251120", "requirements": []}
            ]}
        });
        let two_terms = json!({
            "spec": {"amiSelectorTerms": [{"alias": "al2@latest"}, {"id": "ami-9"}]},
            "status": {"amis": [{"id": "ami-9", "requirements": []}]}
        });
        let seen = observed_aliases(&[&class, &two_terms]);
        assert_eq!(
            seen.len(),
            1,
            "a class with two terms says nothing per alias"
        );
        assert_eq!(seen[0].alias, "al2023@latest");
        assert_eq!(seen[0].release.as_deref(), Some("v20251120"));
        assert_eq!(seen[0].amis.len(), 2);
    }
}
