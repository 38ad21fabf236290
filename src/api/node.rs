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
    use super::*;
    use crate::testing::node;

    /// A node under memory pressure whose Ready condition is `status`.
    fn with_ready(status: &str) -> Node {
        let n = node("n").condition("MemoryPressure", "True");
        n.condition("Ready", status).build()
    }

    #[test]
    fn only_ready_true_is_ready() {
        assert!(is_ready(&with_ready("True")));
        assert!(!is_ready(&with_ready("Unknown")));
        assert!(!is_ready(&with_ready("False")));
        assert!(!is_ready(&node("n").build()));
        assert!(!is_ready(&Node::default()));
    }

    #[test]
    fn a_taint_is_found_by_its_key() {
        let n = node("n").taint("a", "NoSchedule");
        let n = n.taint("karpenter.sh/disrupted", "NoSchedule").build();
        assert!(has_taint(&n, "karpenter.sh/disrupted"));
        assert!(!has_taint(&n, "karpenter.sh/unregistered"));
        assert!(!has_taint(&Node::default(), "a"));
    }
}
