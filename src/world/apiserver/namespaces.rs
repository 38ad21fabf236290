//! The Namespace objects a simulated cluster's objects live in.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Namespace, NamespaceSpec, NamespaceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::MemoryCluster;
use crate::cluster::ObjectKey;

/// The namespaces every cluster has.
const BUILT_IN: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

impl MemoryCluster {
    /// Creates the Namespace of every namespace objects live in, and of the
    /// four every cluster has, as the scenario's author would have: active,
    /// with the `kubernetes` finalizer and the `kubernetes.io/metadata.name`
    /// label the API server sets. Existing Namespaces are left as they are.
    pub fn ensure_namespaces(&self) {
        let mut names: BTreeSet<String> = self.read().namespaces();
        names.extend(BUILT_IN.map(String::from));
        names.remove("");
        for name in names {
            if self
                .get_opt::<Namespace>(&ObjectKey::cluster(&name))
                .is_some()
            {
                continue;
            }
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some([("kubernetes.io/metadata.name".to_string(), name)].into()),
                    ..Default::default()
                },
                spec: Some(NamespaceSpec {
                    finalizers: Some(vec!["kubernetes".into()]),
                }),
                status: Some(NamespaceStatus {
                    phase: Some("Active".into()),
                    ..Default::default()
                }),
            };
            // Only a Namespace created meanwhile refuses this: it exists.
            let _ = self.create(ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;
    use crate::clock::{ManualClock, Timestamp};

    #[test]
    fn the_namespaces_objects_live_in_and_the_built_in_four_exist_once() {
        let cluster =
            MemoryCluster::new(std::sync::Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH)));
        let cm = ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("team-a".into()),
                name: Some("settings".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        cluster.create(cm).expect("create");
        cluster.ensure_namespaces();
        cluster.ensure_namespaces();
        let names: Vec<String> = cluster
            .list::<Namespace>(None, &crate::cluster::Selector::everything())
            .items
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        assert_eq!(
            names,
            [
                "default",
                "kube-node-lease",
                "kube-public",
                "kube-system",
                "team-a"
            ]
        );
        let team = cluster
            .get_opt::<Namespace>(&ObjectKey::cluster("team-a"))
            .expect("team-a");
        assert_eq!(
            team.metadata.labels.as_ref().unwrap()["kubernetes.io/metadata.name"],
            "team-a"
        );
        assert_eq!(
            team.status.as_ref().unwrap().phase.as_deref(),
            Some("Active")
        );
    }
}
