//! NodeClaims as the controller's loops make and read them: the object for
//! a planned claim and its name (the provisioner, disruption's
//! replacements and static pools all make them), and when a claim was
//! created, its `expireAfter`, and the share of its lifetime still ahead
//! of it (disruption and static capacity weigh candidates with these).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::ObjectMeta;

use super::Controller;
use crate::api::common::{NodeSelectorRequirementWithMinValues, Operator};
use crate::api::nodeclaim::{NodeClaimResources, NodeClaimSpec};
use crate::api::{EC2NodeClass, FINALIZER_TERMINATION, LABEL_NODEPOOL, NodeClaim, NodePool};
use crate::clock::Timestamp;
use crate::cloud::CloudProvider;
use crate::cluster::{Cluster, ObjectKey};
use crate::disruption;
use crate::model::{Requirement, Requirements};
use crate::scheduling::NewNodeClaim;
use crate::timing::{DurationSyntax, NillableDuration, parse_duration};

/// The share of a NodeClaim's lifetime still ahead of it (1 without
/// `expireAfter`), which weighs its disruption cost as the reference's
/// `LifetimeRemaining` does.
pub(super) fn lifetime_remaining(claim: &NodeClaim, now: Timestamp) -> f64 {
    lifetime_left(claim_expire_after(claim), claim_created(claim, now), now)
}

/// [`lifetime_remaining`] of a NodeClaim created at `created` that expires
/// `expire_after` later (`None`: never).
pub(super) fn lifetime_left(
    expire_after: Option<Duration>,
    created: Timestamp,
    now: Timestamp,
) -> f64 {
    let expires_at = disruption::expires_at(expire_after, created);
    match (expire_after, expires_at) {
        (Some(d), Some(t)) if !d.is_zero() => (Duration::try_from(t.duration_since(now))
            .unwrap_or_default()
            .as_secs_f64()
            / d.as_secs_f64())
        .clamp(0.0, 1.0),
        _ => 1.0,
    }
}

/// A duration in Karpenter's `Never`-or-duration syntax; `default` when it
/// is unset or does not parse (the schema rejects that at admission).
pub(super) fn duration_or_never(s: Option<&str>, default: Option<Duration>) -> Option<Duration> {
    match s.map(|s| parse_duration(s, DurationSyntax::HmsOrNever)) {
        None => default,
        Some(Ok(NillableDuration::After(d))) => Some(d),
        Some(Ok(NillableDuration::Never)) => None,
        Some(Err(_)) => default,
    }
}

/// A NodeClaim's `expireAfter` (the reference's default of 720h when
/// unset); `None` for `Never`.
pub(super) fn claim_expire_after(claim: &NodeClaim) -> Option<Duration> {
    duration_or_never(
        claim.spec.expire_after.as_deref(),
        Some(Duration::from_secs(720 * 3600)),
    )
}

/// When a NodeClaim was created (`now` for one not stored yet).
pub(super) fn claim_created(claim: &NodeClaim, now: Timestamp) -> Timestamp {
    claim
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now)
}

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// A name for a new NodeClaim of a NodePool: `<pool>-<5 hex digits>`
    /// from a sequence, skipping names in use. A controller that starts
    /// (after a restart, or a leader change) continues the sequence past
    /// the highest suffix among the NodeClaims it finds, so that it does
    /// not hand out again the names of claims deleted moments ago.
    pub(super) fn next_claim_name(&mut self, pool: &str) -> String {
        if self.sequence == 0 {
            self.sequence = self
                .cluster
                .list::<NodeClaim>()
                .iter()
                .filter_map(|c| claim_suffix(c.metadata.name.as_deref()?))
                .max()
                .unwrap_or(0);
        }
        loop {
            self.sequence += 1;
            let name = format!("{pool}-{:05x}", self.sequence & 0xfffff);
            if self
                .cluster
                .get::<NodeClaim>(&ObjectKey::cluster(name.as_str()))
                .is_none()
            {
                return name;
            }
        }
    }

    /// The NodeClaim object for a planned claim of a NodePool, stamped with
    /// the drift hashes of the NodePool and its EC2NodeClass.
    pub(super) fn nodeclaim_for(
        &mut self,
        name: String,
        pool: &NodePool,
        class: Option<&EC2NodeClass>,
        claim: &NewNodeClaim,
    ) -> NodeClaim {
        let pool_name = pool.metadata.name.clone().unwrap_or_default();
        let template = &pool.spec.template;
        let mut labels: BTreeMap<String, String> = template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        labels.insert(LABEL_NODEPOOL.to_string(), pool_name.clone());
        let mut requirements = claim.requirements.clone();
        // A static pool's claim lists no types: the cloud provider takes
        // the cheapest its requirements allow, as the reference's does.
        if !claim.instance_types.is_empty() {
            requirements.add(
                crate::api::LABEL_INSTANCE_TYPE,
                Requirement::in_values(claim.instance_types.iter().cloned()),
            );
        }
        let requests = claim.requests.to_quantities();
        NodeClaim {
            metadata: ObjectMeta {
                name: Some(name),
                labels: Some(labels),
                annotations: {
                    let mut a = template
                        .metadata
                        .as_ref()
                        .and_then(|m| m.annotations.clone())
                        .unwrap_or_default();
                    if let Some(class) = class {
                        a.extend(crate::drift::stamp_annotations(pool, class));
                    }
                    a.extend(self.overlay_annotations(&pool_name, claim));
                    (!a.is_empty()).then_some(a)
                },
                finalizers: Some(vec![FINALIZER_TERMINATION.to_string()]),
                owner_references: pool.metadata.uid.clone().map(|uid| {
                    vec![OwnerReference {
                        api_version: NodePool::api_version(&()).into_owned(),
                        kind: NodePool::kind(&()).into_owned(),
                        name: pool_name,
                        uid,
                        block_owner_deletion: Some(true),
                        controller: None,
                    }]
                }),
                ..ObjectMeta::default()
            },
            spec: NodeClaimSpec {
                expire_after: template.spec.expire_after.clone(),
                node_class_ref: template.spec.node_class_ref.clone(),
                requirements: node_selector(&requirements),
                resources: Some(NodeClaimResources {
                    requests: Some(requests),
                }),
                startup_taints: template.spec.startup_taints.clone(),
                taints: template.spec.taints.clone(),
                termination_grace_period: template.spec.termination_grace_period.clone(),
            },
            status: None,
        }
    }
}

/// Requirements as a NodeClaim writes them.
fn node_selector(reqs: &Requirements) -> Vec<NodeSelectorRequirementWithMinValues> {
    let mut out = Vec::new();
    for (key, r) in &reqs.0 {
        let mut push = |operator: Operator, values: Vec<String>, min: Option<usize>| {
            out.push(NodeSelectorRequirementWithMinValues {
                key: key.clone(),
                min_values: min.and_then(|m| i64::try_from(m).ok()),
                operator,
                values: (!values.is_empty()).then_some(values),
            })
        };
        let values: Vec<String> = r.values.iter().cloned().collect();
        let bounded = r.greater_than.is_some() || r.less_than.is_some();
        match (r.complement, values.is_empty()) {
            (false, false) => push(Operator::In, values, r.min_values),
            (false, true) => push(Operator::DoesNotExist, values, None),
            (true, true) if !bounded => push(Operator::Exists, values, r.min_values),
            (true, true) => {}
            (true, false) => push(Operator::NotIn, values, r.min_values),
        }
        if let Some(g) = r.greater_than {
            push(Operator::Gt, vec![g.to_string()], None);
        }
        if let Some(l) = r.less_than {
            push(Operator::Lt, vec![l.to_string()], None);
        }
    }
    out
}

/// The sequence number of a NodeClaim name `<pool>-<5 hex digits>`.
fn claim_suffix(name: &str) -> Option<u64> {
    let (_, suffix) = name.rsplit_once('-')?;
    if suffix.len() != 5 {
        return None;
    }
    u64::from_str_radix(suffix, 16).ok()
}
