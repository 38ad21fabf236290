//! The cluster of the 24-hour simulate benchmark, shared by the benches
//! that start from it (`simulate`, `forecast`): one NodePool over 16-vCPU
//! general-purpose types, Deployments of 780m / 1.5Gi pods (twenty to a
//! node) and a small DaemonSet on every node.

use std::fmt::Write as _;

/// Deployments and replicas of the full run: 40,000 pods on 2,000 nodes.
pub const DEPLOYMENTS: usize = 40;
pub const REPLICAS: usize = 1_000;

pub const CONFIG: &str = r#"apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiSelectorTerms:
    - alias: al2023@latest
  role: KarpenterNodeRole-bench
  subnetSelectorTerms:
    - tags: {karpenter.sh/discovery: bench}
  securityGroupSelectorTerms:
    - tags: {karpenter.sh/discovery: bench}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: general
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - key: karpenter.k8s.aws/instance-cpu
          operator: In
          values: ["16"]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["m", "c", "r"]
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64"]
  limits:
    cpu: "100000"
"#;

/// The scenario: the DaemonSet at once, then `deployments` Deployments of
/// `replicas` pods, one every `every_minutes`, until `until`.
pub fn scenario_text(
    deployments: usize,
    replicas: usize,
    every_minutes: usize,
    until: &str,
) -> String {
    let mut s = String::from("config: repo\ntimeline:\n  - at: 0s\n    apply:\n");
    s.push_str(
        "      - {apiVersion: apps/v1, kind: DaemonSet, metadata: {name: agent, namespace: kube-system}, spec: {selector: {matchLabels: {app: agent}}, template: {metadata: {labels: {app: agent}}, spec: {tolerations: [{operator: Exists}], containers: [{name: a, image: i, resources: {requests: {cpu: 100m, memory: 128Mi}}}]}}}}\n",
    );
    for d in 0..deployments {
        let minutes = d * every_minutes;
        let _ = writeln!(
            s,
            "  - at: {minutes}m\n    apply:\n      - {{apiVersion: apps/v1, kind: Deployment, metadata: {{name: app-{d:02}, namespace: default}}, spec: {{replicas: {replicas}, selector: {{matchLabels: {{app: app-{d:02}}}}}, template: {{metadata: {{labels: {{app: app-{d:02}}}}}, spec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: 780m, memory: 1536Mi}}}}}}]}}}}}}}}"
        );
    }
    let _ = writeln!(s, "until: {until}");
    s
}
