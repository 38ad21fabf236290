//! The capacity type of nodes whose reservation ended, as Karpenter's
//! `capacityreservation.capacitytype` controller keeps it: when EC2 reports
//! the instance of a NodeClaim labelled `reserved` as `on-demand` (an
//! on-demand capacity reservation ended, and its instances run on as
//! on-demand instances), the NodeClaim and its registered Node are
//! relabelled `on-demand` and lose the reservation labels. Only that way
//! round: an on-demand instance never becomes reserved. Deleting
//! NodeClaims and Nodes are left alone.

use std::collections::HashMap;

use super::Controller;
use crate::api::LABEL_REGISTERED;
use crate::api::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, LABEL_CAPACITY_TYPE, NodeClaim};
use crate::cloud::aws::reservations::{
    LABEL_RESERVATION_ID, LABEL_RESERVATION_INTERRUPTIBLE, LABEL_RESERVATION_TYPE,
};
use crate::cloud::{CloudProvider, Instance};
use crate::cluster::Cluster;

/// The labels a node launched into a reservation carries, and loses when
/// it ends.
const RESERVATION_LABELS: [&str; 3] = [
    LABEL_RESERVATION_ID,
    LABEL_RESERVATION_TYPE,
    LABEL_RESERVATION_INTERRUPTIBLE,
];

/// `labels` demoted from reserved to on-demand; `None` when they are not
/// labelled reserved.
fn demoted(
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<std::collections::BTreeMap<String, String>> {
    let labels = labels?;
    if labels.get(LABEL_CAPACITY_TYPE).map(String::as_str) != Some(CAPACITY_TYPE_RESERVED) {
        return None;
    }
    let mut out = labels.clone();
    out.insert(
        LABEL_CAPACITY_TYPE.to_string(),
        CAPACITY_TYPE_ON_DEMAND.to_string(),
    );
    for k in RESERVATION_LABELS {
        out.remove(k);
    }
    Some(out)
}

impl<C: Cluster, P: CloudProvider> Controller<C, P> {
    /// Relabels the NodeClaims and Nodes whose instance `instances` lists
    /// as on-demand while they say reserved (see the module documentation).
    pub(super) async fn sync_capacity_types(&mut self, instances: &[std::sync::Arc<Instance>]) {
        let on_demand: HashMap<&str, &Instance> = instances
            .iter()
            .filter(|i| i.capacity_type == CAPACITY_TYPE_ON_DEMAND)
            .map(|i| (i.provider_id.as_str(), &**i))
            .collect();
        if on_demand.is_empty() {
            return;
        }
        let nodes = self.node_index();
        for claim in self.cluster.list::<NodeClaim>() {
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(pid) = claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .filter(|p| on_demand.contains_key(p))
            else {
                continue;
            };
            let name = claim.metadata.name.clone().unwrap_or_default();
            if let Some(labels) = demoted(claim.metadata.labels.as_ref()) {
                let mut updated = (*claim).clone();
                updated.metadata.labels = Some(labels);
                match self.cluster.replace(updated).await {
                    Ok(_) => self.event(
                        format!("NodeClaim/{name}"),
                        "CapacityTypeChanged",
                        "the capacity reservation ended: the instance runs on demand".to_string(),
                    ),
                    Err(e) => {
                        tracing::warn!(nodeclaim = %name, error = %e, "relabelling capacity type");
                        continue;
                    }
                }
            }
            // Its Node, once registered (labels are synced at registration
            // otherwise).
            for node in nodes.providing(pid).iter().filter(|n| {
                n.metadata.deletion_timestamp.is_none()
                    && n.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(LABEL_REGISTERED))
                        .is_some_and(|v| v == "true")
            }) {
                let Some(labels) = demoted(node.metadata.labels.as_ref()) else {
                    continue;
                };
                let mut updated = (**node).clone();
                updated.metadata.labels = Some(labels);
                if let Err(e) = self.cluster.replace(updated).await {
                    tracing::warn!(nodeclaim = %name, error = %e, "relabelling the node's capacity type");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reserved_labels_are_demoted_and_lose_the_reservation() {
        let labels = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let reserved = labels(&[
            (LABEL_CAPACITY_TYPE, "reserved"),
            (LABEL_RESERVATION_ID, "cr-1"),
            (LABEL_RESERVATION_TYPE, "default"),
            (LABEL_RESERVATION_INTERRUPTIBLE, "false"),
            ("team", "ml"),
        ]);
        assert_eq!(
            demoted(Some(&reserved)),
            Some(labels(&[
                (LABEL_CAPACITY_TYPE, "on-demand"),
                ("team", "ml")
            ]))
        );
        let spot = labels(&[(LABEL_CAPACITY_TYPE, "spot")]);
        assert_eq!(demoted(Some(&spot)), None);
        assert_eq!(demoted(None), None);
    }

    /// When a reserved NodeClaim's instance is listed on demand, the claim
    /// and its registered Node are relabelled; a Node of another instance
    /// is left alone, though labelled reserved too.
    #[test]
    fn a_reserved_claim_and_its_node_are_relabelled_when_the_instance_runs_on_demand() {
        use std::collections::BTreeSet;

        use k8s_openapi::api::core::v1::Node;

        use crate::api::EC2NodeClass;
        use crate::cluster::ObjectKey;
        use crate::controller::Settings;
        use crate::testing::{Env, World, from_yaml};

        let Env {
            cluster,
            cloud,
            mut controller,
            rt,
            ..
        } = World::new().env(Settings::default());
        let class = EC2NodeClass::test("default");
        let instance = rt
            .block_on(cloud.create(&NodeClaim::test("c1"), &class, &BTreeSet::new()))
            .expect("launches")
            .instance;
        assert_eq!(instance.capacity_type, CAPACITY_TYPE_ON_DEMAND);
        let reserved = [
            (LABEL_CAPACITY_TYPE, CAPACITY_TYPE_RESERVED),
            (LABEL_RESERVATION_ID, "cr-1"),
        ];
        let mut claim = NodeClaim::test("c1");
        claim.metadata.labels = Some(
            reserved
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        claim
            .status
            .get_or_insert_with(Default::default)
            .provider_id = Some(instance.provider_id.clone());
        cluster.create(claim).expect("created");
        let node = |name: &str, provider_id: &str| -> Node {
            from_yaml(&format!(
                "metadata: {{name: {name}, labels: {{{LABEL_CAPACITY_TYPE}: reserved, {LABEL_RESERVATION_ID}: cr-1, {LABEL_REGISTERED}: 'true'}}}}\nspec: {{providerID: '{provider_id}'}}"
            ))
        };
        cluster
            .create(node("n1", &instance.provider_id))
            .expect("created");
        cluster
            .create(node("n2", "aws:///us-east-1a/i-0ffffffffffffffff"))
            .expect("created");

        rt.block_on(controller.reconcile_garbage());
        let labels = |name: &str| {
            let node = Cluster::get::<Node>(&*cluster, &ObjectKey::cluster(name)).expect("exists");
            node.metadata.labels.clone().unwrap_or_default()
        };
        let n1 = labels("n1");
        assert_eq!(n1[LABEL_CAPACITY_TYPE], CAPACITY_TYPE_ON_DEMAND);
        assert!(!n1.contains_key(LABEL_RESERVATION_ID), "{n1:?}");
        let n2 = labels("n2");
        assert_eq!(
            n2[LABEL_CAPACITY_TYPE], CAPACITY_TYPE_RESERVED,
            "another instance's"
        );
        let claim =
            Cluster::get::<NodeClaim>(&*cluster, &ObjectKey::cluster("c1")).expect("exists");
        let claim_labels = claim.metadata.labels.clone().unwrap_or_default();
        assert_eq!(claim_labels[LABEL_CAPACITY_TYPE], CAPACITY_TYPE_ON_DEMAND);
    }
}
