//! NodeOverlays under the `NodeOverlay` feature gate: the cluster's
//! overlays are read (and converted again only when one changed), applied
//! to the NodePools' instance types where those enter every solve
//! ([`Controller::nodepool_specs`](super::Controller)), and each overlay's
//! `ValidationSucceeded` and `Ready` conditions say whether it applies
//! (reason `Conflict` or `RuntimeValidation` when it does not), as the
//! reference's `nodeoverlay` controller writes them. NodeClaims of
//! overlaid types are annotated as the reference's are
//! (`karpenter.sh/price-overlay-applied`,
//! `karpenter.sh/capacity-overlay-applied`), and a price-overlaid one
//! carries its launch order for the cloud provider.
//!
//! The overlaid NodePools feed every solve, consolidation's prices and the
//! lower bound. The launch order is the annotation
//! `dovetail.dev/launch-priority`, which both providers follow.

use std::collections::BTreeMap;

use super::{Conditioned, Controller};
use crate::api::{
    ANNOTATION_CAPACITY_OVERLAY_APPLIED, ANNOTATION_LAUNCH_PRIORITY,
    ANNOTATION_PRICE_OVERLAY_APPLIED, ApiKind, NodeOverlay,
};
use crate::cloud::CloudProvider;
use crate::cluster::Cluster;
use crate::model::overlay::{Outcome, Overlay, Verdict};
use crate::scheduling::{NewNodeClaim, NodePoolSpec};

/// The condition the reference sets from its checks.
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";

/// The cluster's overlays as the core reads them, and the NodeOverlay
/// revision they were read at.
#[derive(Debug, Default)]
pub(super) struct OverlayCache {
    revision: Option<u64>,
    overlays: Vec<Overlay>,
    /// What the last application did.
    pub(super) outcome: Outcome,
}

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// Applies the NodeOverlays to the NodePools' instance types, and
    /// records each overlay's verdict in its status. Nothing with the gate
    /// off.
    pub(super) async fn apply_overlays(&mut self, specs: &mut [NodePoolSpec]) {
        if !self.settings.node_overlay {
            self.overlays.outcome = Outcome::default();
            return;
        }
        let revision = self.cluster.revision::<NodeOverlay>();
        if self.overlays.revision != Some(revision) {
            self.overlays.overlays = self
                .cluster
                .list::<NodeOverlay>()
                .iter()
                .filter(|o| o.metadata.deletion_timestamp.is_none())
                .map(|o| {
                    let mut doc = serde_json::to_value(o.as_ref()).unwrap_or_default();
                    if let Some(m) = doc.as_object_mut() {
                        m.insert(
                            "apiVersion".into(),
                            ApiKind::NodeOverlay.api_version().into(),
                        );
                        m.insert("kind".into(), ApiKind::NodeOverlay.kind().into());
                        m.remove("status");
                    }
                    crate::convert::overlay(&doc)
                })
                .collect();
            self.overlays.revision = Some(revision);
        }
        let outcome = crate::convert::apply_overlays(&self.overlays.overlays, specs);
        self.write_overlay_statuses(&outcome).await;
        self.overlays.outcome = outcome;
    }

    /// `ValidationSucceeded` and `Ready` of each overlay, written where
    /// they changed.
    async fn write_overlay_statuses(&mut self, outcome: &Outcome) {
        let now = self.clock.now();
        let verdicts: BTreeMap<&str, &Verdict> = outcome
            .verdicts
            .iter()
            .map(|(n, v)| (n.as_str(), v))
            .collect();
        for o in self.cluster.list::<NodeOverlay>() {
            let name = o.metadata.name.clone().unwrap_or_default();
            let Some(verdict) = verdicts.get(name.as_str()) else {
                continue;
            };
            let mut updated = (*o).clone();
            let conds = updated.conditions_mut();
            let (ok, reason) = match verdict.reason() {
                None => (true, VALIDATION_SUCCEEDED),
                Some(r) => (false, r),
            };
            let message = verdict.message();
            let a = super::set_condition(conds, VALIDATION_SUCCEEDED, ok, reason, &message, now);
            let ready_reason = if ok { "Ready" } else { reason };
            let b = super::set_condition(
                conds,
                super::conditions::READY,
                ok,
                ready_reason,
                &message,
                now,
            );
            if !(a || b) {
                continue;
            }
            if self.record_status(updated).await.is_ok() && !ok {
                self.event(
                    format!("NodeOverlay/{name}"),
                    reason,
                    format!("not applied: {message}"),
                );
            }
        }
    }

    /// The annotations a new NodeClaim of `pool` gets from the overlays
    /// of its instance types: the reference's markers, and the launch
    /// order of a price-overlaid one (its types, cheapest overlaid first).
    pub(super) fn overlay_annotations(
        &self,
        pool: &str,
        claim: &NewNodeClaim,
    ) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let outcome = &self.overlays.outcome;
        let has = |set: &std::collections::BTreeSet<(String, String)>| {
            claim
                .instance_types
                .iter()
                .any(|t| set.contains(&(pool.to_string(), t.clone())))
        };
        if has(&outcome.price_overlaid) {
            out.insert(ANNOTATION_PRICE_OVERLAY_APPLIED.to_string(), "true".into());
            out.insert(
                ANNOTATION_LAUNCH_PRIORITY.to_string(),
                claim.instance_types.join(","),
            );
        }
        if has(&outcome.capacity_overlaid) {
            out.insert(
                ANNOTATION_CAPACITY_OVERLAY_APPLIED.to_string(),
                "true".into(),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::api::NodeClaim;
    use crate::cluster::ObjectKey;
    use crate::controller::{BATCH_IDLE, Settings};
    use crate::testing::{Env, World, example_class, example_pool};

    fn obj<K: serde::de::DeserializeOwned>(v: Value) -> K {
        serde_json::from_value(v).unwrap()
    }

    fn overlay(name: &str, weight: i32, family: &str, adjustment: &str) -> NodeOverlay {
        obj(
            json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": name},
            "spec": {"weight": weight, "priceAdjustment": adjustment, "requirements": [
                {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": [family]}]}}),
        )
    }

    /// The reference's "should pass with a single overlay" and "should
    /// fail when requirements overlays overlap", through the controller:
    /// statuses written once, NodeClaims of overlaid types annotated and
    /// given their launch order.
    #[test]
    fn overlays_statuses_and_nodeclaim_annotations() {
        let w = World::new();
        let cluster = w.cluster.clone();
        cluster.create(example_class()).unwrap();
        cluster.create(example_pool()).unwrap();
        // m7i free, so its claims come first; a second overlay of the same
        // weight on the same offerings conflicts.
        cluster
            .create(overlay("m7i-free", 10, "m7i", "-100%"))
            .unwrap();
        cluster.create(overlay("a-m7i", 10, "m7i", "+1")).unwrap();
        cluster.create(crate::testing::pending_pod("a")).unwrap();
        let Env {
            clock,
            mut controller,
            rt,
            ..
        } = w.env(Settings {
            node_overlay: true,
            ..Settings::default()
        });
        rt.block_on(controller.reconcile_provisioning());
        clock.advance(BATCH_IDLE).unwrap();
        rt.block_on(controller.reconcile_provisioning());

        let condition = |name: &str, type_: &str| {
            let o = cluster
                .get_opt::<NodeOverlay>(&ObjectKey::cluster(name))
                .unwrap();
            crate::api::common::find_condition(
                o.status.as_ref().and_then(|s| s.conditions.as_deref()),
                type_,
            )
            .cloned()
            .unwrap()
        };
        assert!(condition("m7i-free", VALIDATION_SUCCEEDED).is_true());
        assert!(condition("m7i-free", "Ready").is_true());
        let conflict = condition("a-m7i", VALIDATION_SUCCEEDED);
        assert!(!conflict.is_true());
        assert_eq!(conflict.reason.as_deref(), Some("Conflict"));
        assert_eq!(
            conflict.message.as_deref(),
            Some("conflict with another overlay")
        );

        let claims = Cluster::list::<NodeClaim>(cluster.as_ref());
        assert_eq!(claims.len(), 1);
        let a = claims[0].metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            a.get(ANNOTATION_PRICE_OVERLAY_APPLIED).map(String::as_str),
            Some("true")
        );
        let order = a.get(ANNOTATION_LAUNCH_PRIORITY).unwrap();
        assert!(order.starts_with("m7i."), "{order}");
        assert!(!a.contains_key(ANNOTATION_CAPACITY_OVERLAY_APPLIED));
        // The launch follows the overlaid order.
        rt.block_on(controller.reconcile_nodeclaims());
        let launched = Cluster::list::<NodeClaim>(cluster.as_ref())[0]
            .metadata
            .labels
            .clone()
            .unwrap_or_default();
        assert!(
            launched
                .get(crate::api::LABEL_INSTANCE_TYPE)
                .is_some_and(|t| t.starts_with("m7i.")),
            "{launched:?}"
        );
        // Statuses are written once: another pass changes nothing.
        let before = cluster
            .get_opt::<NodeOverlay>(&ObjectKey::cluster("a-m7i"))
            .unwrap()
            .metadata
            .resource_version
            .clone();
        clock.advance(std::time::Duration::from_secs(61)).unwrap();
        rt.block_on(controller.reconcile_provisioning());
        let after = cluster
            .get_opt::<NodeOverlay>(&ObjectKey::cluster("a-m7i"))
            .unwrap()
            .metadata
            .resource_version
            .clone();
        assert_eq!(before, after);
    }
}
