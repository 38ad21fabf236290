//! The kubeconfig that points kubectl at the served API.

/// Writes a kubeconfig for the served address, with a context named
/// `dovetail`.
pub fn kubeconfig(address: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: dovetail
  cluster:
    server: http://{address}
contexts:
- name: dovetail
  context:
    cluster: dovetail
    user: dovetail
    namespace: default
current-context: dovetail
users:
- name: dovetail
  user: {{}}
"
    )
}
