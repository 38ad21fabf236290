//! What the controller and the simulated kubelet read off a Node: whether
//! it is `Ready`, and whether it carries a taint. Defined once, for every
//! loop that asks.

use k8s_openapi::api::core::v1::Node;

/// Whether a Node reports `Ready=True` (an absent or `Unknown` Ready
/// condition is not ready, as the node lifecycle controller has it).
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether a Node carries a taint with this key, whatever its effect.
pub fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, Taint};

    use super::*;

    fn node(ready: Option<&str>, taints: &[&str]) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|k| Taint {
                            key: (*k).into(),
                            effect: "NoSchedule".into(),
                            ..Taint::default()
                        })
                        .collect(),
                ),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: ready.map(|s| {
                    vec![
                        NodeCondition {
                            type_: "MemoryPressure".into(),
                            status: "True".into(),
                            ..NodeCondition::default()
                        },
                        NodeCondition {
                            type_: "Ready".into(),
                            status: s.into(),
                            ..NodeCondition::default()
                        },
                    ]
                }),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn only_ready_true_is_ready() {
        assert!(is_ready(&node(Some("True"), &[])));
        assert!(!is_ready(&node(Some("Unknown"), &[])));
        assert!(!is_ready(&node(Some("False"), &[])));
        assert!(!is_ready(&node(None, &[])));
        assert!(!is_ready(&Node::default()));
    }

    #[test]
    fn a_taint_is_found_by_its_key() {
        let n = node(None, &["a", "karpenter.sh/disrupted"]);
        assert!(has_taint(&n, "karpenter.sh/disrupted"));
        assert!(!has_taint(&n, "karpenter.sh/unregistered"));
        assert!(!has_taint(&Node::default(), "a"));
    }
}
