//! Reader of cluster-state files (snapshots): plain Kubernetes objects as a
//! `v1/List`, multi-document YAML, or JSON lines (see CONVENTIONS.md).
//! Shared by `plan --snapshot`, `simulate` and `diff`.

use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::Value;

/// Why a file of objects could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading {file}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}:{line}: {message}")]
    Parse {
        file: String,
        line: usize,
        message: String,
    },
}

/// One object of a file with the line it starts on (1-based).
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub line: usize,
    pub object: Value,
}

/// Reads every object of a file (List items are flattened).
pub fn read_objects(path: &Path) -> Result<Vec<Located>, ReadError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ReadError::Io {
        file: file.clone(),
        source,
    })?;
    parse_objects(&file, &text)
}

/// Parses objects from text; `file` names it in errors.
pub fn parse_objects(file: &str, text: &str) -> Result<Vec<Located>, ReadError> {
    let err = |line: usize, message: String| ReadError::Parse {
        file: file.to_string(),
        line,
        message,
    };
    let trimmed = text.trim_start();
    let mut docs: Vec<Located> = Vec::new();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        // One JSON document, or JSON lines.
        match serde_json::from_str::<Value>(text) {
            Ok(v) => docs.push(Located { line: 1, object: v }),
            Err(whole) => {
                let many = text.lines().filter(|l| !l.trim().is_empty()).count() > 1;
                if !many {
                    return Err(err(whole.line(), whole.to_string()));
                }
                for (i, l) in text.lines().enumerate() {
                    if l.trim().is_empty() {
                        continue;
                    }
                    let v =
                        serde_json::from_str::<Value>(l).map_err(|e| err(i + 1, e.to_string()))?;
                    docs.push(Located {
                        line: i + 1,
                        object: v,
                    });
                }
            }
        }
    } else {
        let parsed: Vec<serde_saphyr::Spanned<Value>> =
            serde_saphyr::from_multiple(text).map_err(|e| {
                let line = e.location().map_or(0, |l| l.line() as usize);
                err(line, e.to_string())
            })?;
        for d in parsed {
            if d.value.is_null() {
                continue;
            }
            docs.push(Located {
                line: d.referenced.line() as usize,
                object: d.value,
            });
        }
    }
    let mut out = Vec::new();
    for d in docs {
        flatten(d, &mut out, file)?;
    }
    Ok(out)
}

fn flatten(d: Located, out: &mut Vec<Located>, file: &str) -> Result<(), ReadError> {
    match &d.object {
        Value::Array(items) => {
            for o in items {
                flatten(
                    Located {
                        line: d.line,
                        object: o.clone(),
                    },
                    out,
                    file,
                )?;
            }
        }
        Value::Object(m)
            if m.get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List")) =>
        {
            for o in m
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                out.push(Located {
                    line: d.line,
                    object: o.clone(),
                });
            }
        }
        Value::Object(_) => out.push(d),
        _ => {
            return Err(ReadError::Parse {
                file: file.to_string(),
                line: d.line,
                message: "expected a Kubernetes object".into(),
            });
        }
    }
    Ok(())
}

/// Converts a located object into a typed Kubernetes object.
pub fn typed<T: serde::de::DeserializeOwned>(file: &str, o: &Located) -> Result<T, ReadError> {
    serde_json::from_value(o.object.clone()).map_err(|e| ReadError::Parse {
        file: file.to_string(),
        line: o.line,
        message: format!("{}: {e}", kind_name(&o.object)),
    })
}

/// `Kind/name` of an object, for messages.
pub fn kind_name(o: &Value) -> String {
    let kind = o.get("kind").and_then(Value::as_str).unwrap_or("object");
    let name = o
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?");
    format!("{kind}/{name}")
}

/// The objects of a cluster snapshot, by kind. Karpenter kinds stay
/// untyped JSON so the core does not depend on the API types. Objects are
/// shared, so the controller builds one from its cache without copying.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub nodes: Vec<Arc<Node>>,
    pub pods: Vec<Arc<Pod>>,
    pub nodeclaims: Vec<Value>,
    pub nodepools: Vec<Value>,
    pub ec2nodeclasses: Vec<Value>,
    pub daemonsets: Vec<Arc<DaemonSet>>,
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    pub persistent_volumes: Vec<Arc<PersistentVolume>>,
    pub persistent_volume_claims: Vec<Arc<PersistentVolumeClaim>>,
    pub storage_classes: Vec<Arc<StorageClass>>,
}

/// Reads a snapshot file.
pub fn read_snapshot(path: &Path) -> Result<Snapshot, ReadError> {
    let file = path.display().to_string();
    let objects = read_objects(path)?;
    snapshot_from_objects(&file, &objects)
}

/// Sorts objects into a snapshot; unknown kinds are an error.
pub fn snapshot_from_objects(file: &str, objects: &[Located]) -> Result<Snapshot, ReadError> {
    let mut s = Snapshot::default();
    for o in objects {
        match o.object.get("kind").and_then(Value::as_str).unwrap_or("") {
            "Node" => s.nodes.push(Arc::new(typed(file, o)?)),
            "Pod" => s.pods.push(Arc::new(typed(file, o)?)),
            "NodeClaim" => s.nodeclaims.push(o.object.clone()),
            "NodePool" => s.nodepools.push(o.object.clone()),
            "EC2NodeClass" => s.ec2nodeclasses.push(o.object.clone()),
            "DaemonSet" => s.daemonsets.push(Arc::new(typed(file, o)?)),
            "PodDisruptionBudget" => s.pdbs.push(Arc::new(typed(file, o)?)),
            "PersistentVolume" => s.persistent_volumes.push(Arc::new(typed(file, o)?)),
            "PersistentVolumeClaim" => s.persistent_volume_claims.push(Arc::new(typed(file, o)?)),
            "StorageClass" => s.storage_classes.push(Arc::new(typed(file, o)?)),
            other => {
                return Err(ReadError::Parse {
                    file: file.to_string(),
                    line: o.line,
                    message: format!("unsupported kind {other:?} in a snapshot"),
                });
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_json_lines_with_line_numbers() {
        let text = "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"a\"}}\n\n{\"kind\":\"Pod\",\"metadata\":{\"name\":\"b\"}}\n";
        let o = parse_objects("p.jsonl", text).unwrap();
        assert_eq!(o.len(), 2);
        assert_eq!(o[1].line, 3);
        let bad = "{\"kind\":\"Pod\"}\n{\"kind\":\n";
        let e = parse_objects("p.jsonl", bad).unwrap_err().to_string();
        assert!(e.starts_with("p.jsonl:2:"), "{e}");
    }

    #[test]
    fn reads_lists_and_multi_document_yaml() {
        let list = r#"{"apiVersion":"v1","kind":"List","items":[{"kind":"Node","metadata":{"name":"n"}}]}"#;
        let s = snapshot_from_objects("l.json", &parse_objects("l.json", list).unwrap()).unwrap();
        assert_eq!(s.nodes.len(), 1);
        let yaml = "kind: Pod\nmetadata:\n  name: a\n---\nkind: NodePool\nmetadata:\n  name: p\n";
        let o = parse_objects("s.yaml", yaml).unwrap();
        assert_eq!(o.len(), 2);
        assert_eq!(o[1].line, 5);
        let s = snapshot_from_objects("s.yaml", &o).unwrap();
        assert_eq!((s.pods.len(), s.nodepools.len()), (1, 1));
    }

    #[test]
    fn yaml_errors_name_the_line() {
        let e = parse_objects("s.yaml", "kind: Pod\nmetadata: [\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.yaml:"), "{e}");
        let e = snapshot_from_objects(
            "s.yaml",
            &parse_objects("s.yaml", "kind: Secret\n").unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("s.yaml:1:") && e.contains("Secret"), "{e}");
    }
}
