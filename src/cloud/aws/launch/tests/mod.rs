//! The launch's unit tests, one file per part (`user_data`, `template`,
//! `fleet`), and the fixtures they share.

mod fleet;
mod template;
mod user_data;

use super::*;

/// No reservation known.
pub(super) fn no_reservations() -> &'static Availability {
    static NONE: std::sync::OnceLock<Availability> = std::sync::OnceLock::new();
    NONE.get_or_init(Availability::default)
}
use crate::api::common::{Taint, TaintEffect};

pub(super) fn access() -> ClusterAccess {
    ClusterAccess {
        endpoint: Some("https://ABC.gr7.us-east-1.eks.amazonaws.com".into()),
        ca_bundle: Some("Q0EK".into()),
        service_cidr: Some("10.100.0.0/16".into()),
        dns_ip: None,
    }
}

pub(super) fn claim() -> NodeClaim {
    let mut c = NodeClaim::test("default-abc");
    c.metadata.labels = Some(BTreeMap::from([
        ("karpenter.sh/nodepool".into(), "default".into()),
        ("team".into(), "a".into()),
        ("node.kubernetes.io/instance-type".into(), "m5.large".into()),
        ("node-role.kubernetes.io/worker".into(), "".into()),
        ("example.k8s.io/tier".into(), "a".into()),
    ]));
    c.spec.taints = Some(vec![Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: TaintEffect::NoSchedule,
        time_added: None,
    }]);
    c
}
