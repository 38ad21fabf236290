//! The manifests under `deploy/` are valid Kubernetes objects, and the
//! dovetail command lines in them parse with the current CLI.

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde_json::Value;

fn typed<K: serde::de::DeserializeOwned>(file: &str, doc: &Value) -> K {
    serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{file}: {}: {e}", dovetail::snapshot::kind_name(doc)))
}

#[test]
fn deploy_manifests_are_valid_objects_and_their_dovetail_args_parse() {
    let mut files: Vec<_> = std::fs::read_dir("deploy")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "deploy/ has no manifests");
    let mut dovetail_containers = 0;
    for path in files {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        for doc in &docs {
            match doc["kind"].as_str().unwrap_or_default() {
                "Namespace" => drop(typed::<Namespace>(&file, doc)),
                "ServiceAccount" => drop(typed::<ServiceAccount>(&file, doc)),
                "ClusterRole" => drop(typed::<ClusterRole>(&file, doc)),
                "ClusterRoleBinding" => drop(typed::<ClusterRoleBinding>(&file, doc)),
                "Role" => drop(typed::<Role>(&file, doc)),
                "RoleBinding" => drop(typed::<RoleBinding>(&file, doc)),
                "Deployment" => {
                    let d: Deployment = typed(&file, doc);
                    let spec = d.spec.template.spec.unwrap();
                    for c in spec.containers {
                        if !c.image.unwrap_or_default().starts_with("dovetail") {
                            continue;
                        }
                        dovetail_containers += 1;
                        let args = c.args.unwrap_or_default();
                        let argv = std::iter::once("dovetail".to_string()).chain(args);
                        if let Err(e) = dovetail::cli::args::Cli::try_parse_from(argv) {
                            panic!("{file}: container {}: {e}", c.name);
                        }
                    }
                }
                other => panic!("{file}: unexpected kind {other:?}"),
            }
        }
    }
    assert!(dovetail_containers > 0, "no dovetail container in deploy/");
}
