//! Discovery: `/version`, the API groups and each group version's
//! resources with their verbs, short names and subresources, and the
//! OpenAPI v3 index with each kind's PATCH parameters.

use super::*;

impl ApiServer {
    pub(super) fn version(&self) -> Value {
        let v = self.options.kubernetes_version.trim_start_matches('v');
        let mut parts = v.split('.');
        let major = parts.next().unwrap_or("1");
        let minor = parts.next().unwrap_or("0");
        let git = if v.split('.').count() >= 3 {
            format!("v{v}")
        } else {
            format!("v{major}.{minor}.0")
        };
        json!({
            "major": major,
            "minor": minor,
            "gitVersion": git,
            "gitCommit": "",
            "gitTreeState": "clean",
            "buildDate": "",
            "goVersion": "",
            "compiler": "dovetail",
            "platform": format!("{}/{}", std::env::consts::OS, match std::env::consts::ARCH { "x86_64" => "amd64", "aarch64" => "arm64", a => a }),
        })
    }

    /// The OpenAPI v3 index: one document per group version.
    pub(super) fn openapi_root(&self) -> Value {
        let mut paths = serde_json::Map::new();
        for (g, v) in self.kinds.group_versions() {
            let key = if g.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{g}/{v}")
            };
            paths.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash=dovetail")}),
            );
        }
        json!({"paths": paths})
    }

    /// A group version's OpenAPI v3 document: each kind's object path with
    /// its PATCH operation and the query parameters it takes, which is what
    /// kubectl reads to learn that the server validates fields
    /// (`fieldValidation`). Schemas are not included.
    pub(super) fn openapi_group_version(&self, gv: &str) -> Option<Value> {
        let (group, version) = match gv.split('/').collect::<Vec<_>>().as_slice() {
            ["api", v] => (String::new(), (*v).to_string()),
            ["apis", g, v] => ((*g).to_string(), (*v).to_string()),
            _ => return None,
        };
        let mut paths = serde_json::Map::new();
        for k in self.kinds.iter() {
            let m = k.meta();
            if m.group != group || m.version != version {
                continue;
            }
            let prefix = if group.is_empty() {
                format!("/api/{version}")
            } else {
                format!("/apis/{group}/{version}")
            };
            let path = if m.namespaced {
                format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", m.plural)
            } else {
                format!("{prefix}/{}/{{name}}", m.plural)
            };
            let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
            let gvk = json!({"group": m.group, "version": m.version, "kind": m.kind});
            let op = |id: &str| {
                json!({
                    "operationId": format!("{id}{}", m.kind),
                    "x-kubernetes-group-version-kind": gvk,
                    "parameters": [query("dryRun"), query("fieldManager"), query("fieldValidation"), query("force")],
                    "responses": {"200": {"description": "OK"}},
                })
            };
            paths.insert(path, json!({"get": op("read"), "put": op("replace"), "patch": op("patch"), "delete": op("delete")}));
        }
        if paths.is_empty() {
            return None;
        }
        Some(json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": self.version()["gitVersion"]},
            "paths": paths,
            "components": {},
        }))
    }

    pub(super) fn group_json(&self, group: &str) -> Value {
        let versions: Vec<Value> = self
            .kinds
            .group_versions()
            .into_iter()
            .filter(|(g, _)| g == group)
            .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
            .collect();
        json!({
            "name": group,
            "versions": versions,
            "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
        })
    }

    pub(super) fn group_list(&self) -> Value {
        let mut groups: Vec<String> = Vec::new();
        for (g, _) in self.kinds.group_versions() {
            if !g.is_empty() && !groups.contains(&g) {
                groups.push(g);
            }
        }
        json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": groups.iter().map(|g| self.group_json(g)).collect::<Vec<_>>(),
        })
    }

    pub(super) fn group(&self, group: &str) -> Option<Value> {
        let g = self.group_json(group);
        if g["versions"].as_array().is_none_or(Vec::is_empty) {
            return None;
        }
        let mut g = g;
        g["kind"] = "APIGroup".into();
        g["apiVersion"] = "v1".into();
        Some(g)
    }

    pub(super) fn resources(&self, group: &str, version: &str) -> Value {
        let mut resources = Vec::new();
        for k in self.kinds.iter() {
            let m = k.meta();
            if m.group != group || m.version != version {
                continue;
            }
            let mut verbs = vec![
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ];
            // Namespaces are deleted one by one, by the namespace
            // controller's finalizer.
            if m.kind == "Namespace" {
                verbs.retain(|v| *v != "deletecollection");
            }
            verbs.sort_unstable();
            let mut resource = json!({
                "name": m.plural,
                "singularName": m.singular(),
                "namespaced": m.namespaced,
                "kind": m.kind,
                "verbs": verbs,
            });
            // As the API server: empty lists are left out.
            if !m.short_names.is_empty() {
                resource["shortNames"] = json!(m.short_names);
            }
            if !m.categories.is_empty() {
                resource["categories"] = json!(m.categories);
            }
            resources.push(resource);
            if !WITHOUT_STATUS.contains(&m.kind.as_str()) {
                resources.push(json!({
                    "name": format!("{}/status", m.plural),
                    "singularName": "",
                    "namespaced": m.namespaced,
                    "kind": m.kind,
                    "verbs": ["get", "patch", "update"],
                }));
            }
            if SCALABLE.contains(&m.kind.as_str()) {
                resources.push(json!({
                    "name": format!("{}/scale", m.plural),
                    "singularName": "",
                    "namespaced": true,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }));
            }
            for sub in m.extra_subresources {
                let mut resource = json!({
                    "name": format!("{}/{sub}", m.plural),
                    "singularName": "",
                    "namespaced": m.namespaced,
                    "kind": "Binding",
                    "verbs": ["create"],
                });
                // A subresource of another group names it; Binding is the
                // pods' own group and version.
                let other = match *sub {
                    "eviction" => Some(("Eviction", "policy")),
                    "token" => Some(("TokenRequest", "authentication.k8s.io")),
                    _ => None,
                };
                if let Some((kind, group)) = other {
                    resource["kind"] = json!(kind);
                    resource["group"] = json!(group);
                    resource["version"] = json!("v1");
                }
                resources.push(resource);
            }
        }
        json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": if group.is_empty() { version.to_string() } else { format!("{group}/{version}") },
            "resources": resources,
        })
    }
}
