//! Reader of cluster-state files (snapshots): plain Kubernetes objects as a
//! `v1/List`, multi-document YAML, or JSON lines (see CONVENTIONS.md).
//! Shared by `plan --snapshot`, `simulate` and `diff`.
//!
//! It reads kubectl's `-o yaml` and `-o json` output, lists and JSON lines: the
//! pods `plan` reads, snapshots, and a scenario's manifests. Problems are
//! diagnostics; `Origin` keeps each object's file and line, so a conversion
//! error names where the object is; `diag::kind_name` is an object's `Kind/name`
//! for messages.

use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::Value;

use crate::api::{NodeClaim, SlimPod, SlimPodSpec};
use crate::diag::{JsonPath, Pos};

mod read;

pub use read::{Body, Item, ReadError, items, limits_for, read_text};

/// One object of a file with the line it starts on (1-based).
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub line: usize,
    pub object: Value,
}

/// Reads every object of a file (List items are flattened).
pub fn read_objects(path: &Path) -> Result<Vec<Located>, ReadError> {
    let (file, text) = read_text(path)?;
    parse_objects(&file, &text)
}

/// Parses objects from text; `file` names it in errors.
pub fn parse_objects(file: &str, text: &str) -> Result<Vec<Located>, ReadError> {
    items(file, text)?
        .into_iter()
        .map(|it| {
            Ok(Located {
                line: it.pos.line as usize,
                object: it.value(file)?,
            })
        })
        .collect()
}

/// Converts a located object into a typed Kubernetes object.
pub fn typed<T: serde::de::DeserializeOwned>(file: &str, o: &Located) -> Result<T, ReadError> {
    serde_json::from_value(o.object.clone()).map_err(|e| {
        ReadError::Invalid(Box::new(
            crate::diag::Diagnostic::error("object", e.to_string())
                .in_file(file)
                .at(crate::diag::Pos {
                    line: u32::try_from(o.line).unwrap_or(u32::MAX),
                    column: 1,
                })
                .with_object(crate::diag::kind_name(&o.object)),
        ))
    })
}

/// The objects of a cluster snapshot, by kind. Karpenter kinds stay
/// untyped JSON so the core does not depend on the API types. Objects are
/// shared, so the controller builds one from its cache without copying.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub nodes: Vec<Arc<Node>>,
    /// As the controller reads them ([`SlimPod`]): a large snapshot's
    /// pods are read without the fields nothing reads.
    pub pods: Vec<Arc<SlimPod>>,
    pub nodeclaims: Vec<Arc<NodeClaim>>,
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
    read_snapshot_located(path).map(|(s, _)| s)
}

/// Reads a snapshot file, with where each object is in it.
pub fn read_snapshot_located(path: &Path) -> Result<(Snapshot, Origin), ReadError> {
    let (file, text) = read_text(path)?;
    let items = items(&file, &text)?;
    let mut origin = Origin {
        file: file.clone(),
        lines: std::collections::HashMap::with_capacity(items.len()),
    };
    let snapshot = build(&file, items.iter(), Some(&mut origin))?;
    Ok((snapshot, origin))
}

/// Where the objects of a snapshot are: its file, and the line of each
/// object by `Kind/name` (`Kind/namespace/name` for namespaced kinds).
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// Empty for objects read from a cluster.
    pub file: String,
    lines: std::collections::HashMap<String, usize>,
}

impl Origin {
    /// The line of an object (0 when unknown).
    pub fn line(&self, object: &str) -> usize {
        self.lines.get(object).copied().unwrap_or(0)
    }

    fn record(
        &mut self,
        kind: &str,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        line: usize,
    ) {
        let name = meta.name.as_deref().unwrap_or("");
        let key = match kind {
            "Node" | "NodeClaim" | "PersistentVolume" | "StorageClass" => format!("{kind}/{name}"),
            _ => format!(
                "{kind}/{}/{name}",
                meta.namespace.as_deref().unwrap_or("default")
            ),
        };
        self.lines.insert(key, line);
    }
}

/// Sorts objects into a snapshot; unknown kinds are an error.
pub fn snapshot_from_objects(file: &str, objects: &[Located]) -> Result<Snapshot, ReadError> {
    build(file, objects.iter(), None)
}

/// An object on its way into a [`Snapshot`]: from a file ([`Item`]) or
/// already a JSON value ([`Located`]).
trait Source {
    fn kind(&self) -> &str;
    fn line(&self) -> usize;
    /// Where `path` is inside the object (its start when unknown).
    fn locate(&self, path: &JsonPath) -> Pos;
    fn decode<T: serde::de::DeserializeOwned>(&self, file: &str) -> Result<T, ReadError>;
    fn value(&self, file: &str) -> Result<Value, ReadError>;
}

impl Source for Item<'_> {
    fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or("")
    }
    fn line(&self) -> usize {
        self.pos.line as usize
    }
    fn locate(&self, path: &JsonPath) -> Pos {
        Item::locate(self, path)
    }
    fn decode<T: serde::de::DeserializeOwned>(&self, file: &str) -> Result<T, ReadError> {
        Item::decode(self, file)
    }
    fn value(&self, file: &str) -> Result<Value, ReadError> {
        Item::value(self, file)
    }
}

impl Source for Located {
    fn kind(&self) -> &str {
        self.object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    fn line(&self) -> usize {
        self.line
    }
    fn locate(&self, _: &JsonPath) -> Pos {
        Pos {
            line: u32::try_from(self.line).unwrap_or(u32::MAX),
            column: 1,
        }
    }
    fn decode<T: serde::de::DeserializeOwned>(&self, file: &str) -> Result<T, ReadError> {
        typed(file, self)
    }
    fn value(&self, _: &str) -> Result<Value, ReadError> {
        Ok(self.object.clone())
    }
}

/// The first resource quantity of a pod spec at `at` that the API server
/// would reject, at its line and field.
fn check_resources<S: Source>(
    file: &str,
    o: &S,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    kind: &str,
    at: &JsonPath,
    spec: &SlimPodSpec,
) -> Result<(), ReadError> {
    let Some((path, message)) = crate::scheduling::pod::resource_problems(spec)
        .into_iter()
        .next()
    else {
        return Ok(());
    };
    let mut full = at.clone();
    full.0.extend(path.0);
    Err(ReadError::Invalid(Box::new(
        crate::diag::Diagnostic::error("object", message)
            .in_file(file)
            .at(o.locate(&full))
            .with_object(format!(
                "{kind}/{}/{}",
                meta.namespace.as_deref().unwrap_or("default"),
                meta.name.as_deref().unwrap_or("")
            ))
            .with_path(full),
    )))
}

/// Checks the resources of a pod read from a file, as `build` does for a
/// snapshot's pods.
pub fn check_pod(file: &str, item: &Item<'_>, pod: &SlimPod) -> Result<(), ReadError> {
    match &pod.spec {
        Some(spec) => check_resources(
            file,
            item,
            &pod.metadata,
            "Pod",
            &JsonPath::root().key("spec"),
            spec,
        ),
        None => Ok(()),
    }
}

fn build<'a, S: Source + 'a>(
    file: &str,
    objects: impl Iterator<Item = &'a S>,
    mut origin: Option<&mut Origin>,
) -> Result<Snapshot, ReadError> {
    let mut s = Snapshot::default();
    for o in objects {
        let mut note =
            |kind: &str, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
                if let Some(origin) = origin.as_deref_mut() {
                    origin.record(kind, meta, o.line());
                }
            };
        match o.kind() {
            "Node" => {
                let n: Node = o.decode(file)?;
                note("Node", &n.metadata);
                s.nodes.push(Arc::new(n));
            }
            "Pod" => {
                let mut p: SlimPod = o.decode(file)?;
                if let Some(spec) = &p.spec {
                    check_resources(
                        file,
                        o,
                        &p.metadata,
                        "Pod",
                        &JsonPath::root().key("spec"),
                        spec,
                    )?;
                }
                note("Pod", &p.metadata);
                p.slim();
                s.pods.push(Arc::new(p));
            }
            "NodeClaim" => {
                let c: NodeClaim = o.decode(file)?;
                note("NodeClaim", &c.metadata);
                s.nodeclaims.push(Arc::new(c));
            }
            "NodePool" => s.nodepools.push(o.value(file)?),
            "EC2NodeClass" => s.ec2nodeclasses.push(o.value(file)?),
            "DaemonSet" => {
                let d: DaemonSet = o.decode(file)?;
                if let Some(spec) = &d.spec.template.spec {
                    let at = JsonPath::root().key("spec").key("template").key("spec");
                    let spec = SlimPodSpec::from(spec);
                    check_resources(file, o, &d.metadata, "DaemonSet", &at, &spec)?;
                }
                note("DaemonSet", &d.metadata);
                s.daemonsets.push(Arc::new(d));
            }
            "PodDisruptionBudget" => s.pdbs.push(Arc::new(o.decode(file)?)),
            "PersistentVolume" => s.persistent_volumes.push(Arc::new(o.decode(file)?)),
            "PersistentVolumeClaim" => s.persistent_volume_claims.push(Arc::new(o.decode(file)?)),
            "StorageClass" => s.storage_classes.push(Arc::new(o.decode(file)?)),
            // The workload controllers a forecast recreates evicted pods
            // with; placing pods needs only the pods.
            "Deployment" => drop(o.decode::<k8s_openapi::api::apps::v1::Deployment>(file)?),
            "ReplicaSet" => drop(o.decode::<k8s_openapi::api::apps::v1::ReplicaSet>(file)?),
            "StatefulSet" => drop(o.decode::<k8s_openapi::api::apps::v1::StatefulSet>(file)?),
            "Job" => drop(o.decode::<k8s_openapi::api::batch::v1::Job>(file)?),
            other => {
                return Err(ReadError::at(
                    file,
                    crate::diag::Pos {
                        line: u32::try_from(o.line()).unwrap_or(u32::MAX),
                        column: 1,
                    },
                    format!(
                        "unsupported kind {other:?} in a snapshot; a snapshot holds Node, Pod, NodeClaim, NodePool, EC2NodeClass, DaemonSet, PodDisruptionBudget, PersistentVolume, PersistentVolumeClaim, StorageClass, Deployment, ReplicaSet, StatefulSet and Job objects"
                    ),
                ));
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

    /// A pod as kubectl prints it, with the fields a real one has (about
    /// 120 YAML nodes).
    fn kubectl_pod(i: usize) -> String {
        format!(
            "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: web-{i}\n    namespace: shop\n    uid: 6f1c2a4e-{i:08}\n    resourceVersion: \"{i}\"\n    creationTimestamp: 2026-01-05T00:00:00Z\n    generateName: web-7d9f8c6b5-\n    labels:\n      app: web\n      pod-template-hash: 7d9f8c6b5\n      tier: frontend\n    annotations:\n      kubectl.kubernetes.io/restartedAt: \"2026-01-01T00:00:00Z\"\n      prometheus.io/scrape: \"true\"\n    ownerReferences:\n    - apiVersion: apps/v1\n      kind: ReplicaSet\n      name: web-7d9f8c6b5\n      uid: 0b3e\n      controller: true\n      blockOwnerDeletion: true\n  spec:\n    nodeName: node-{n}\n    schedulerName: default-scheduler\n    restartPolicy: Always\n    terminationGracePeriodSeconds: 30\n    dnsPolicy: ClusterFirst\n    serviceAccountName: default\n    containers:\n    - name: web\n      image: example/web:1.4\n      imagePullPolicy: IfNotPresent\n      ports:\n      - containerPort: 8080\n        name: http\n        protocol: TCP\n      env:\n      - name: MODE\n        value: production\n      - name: POD_NAME\n        valueFrom:\n          fieldRef:\n            apiVersion: v1\n            fieldPath: metadata.name\n      resources:\n        requests:\n          cpu: 250m\n          memory: 512Mi\n        limits:\n          memory: 512Mi\n      volumeMounts:\n      - mountPath: /var/run/secrets/kubernetes.io/serviceaccount\n        name: kube-api-access\n        readOnly: true\n      readinessProbe:\n        httpGet:\n          path: /healthz\n          port: 8080\n          scheme: HTTP\n        periodSeconds: 10\n    tolerations:\n    - effect: NoExecute\n      key: node.kubernetes.io/not-ready\n      operator: Exists\n      tolerationSeconds: 300\n    - effect: NoExecute\n      key: node.kubernetes.io/unreachable\n      operator: Exists\n      tolerationSeconds: 300\n    volumes:\n    - name: kube-api-access\n      projected:\n        defaultMode: 420\n        sources:\n        - serviceAccountToken:\n            expirationSeconds: 3607\n            path: token\n  status:\n    phase: Running\n    podIP: 10.0.{a}.{b}\n    qosClass: Burstable\n    conditions:\n    - type: Ready\n      status: \"True\"\n      lastTransitionTime: 2026-01-05T00:01:00Z\n    - type: PodScheduled\n      status: \"True\"\n      lastTransitionTime: 2026-01-05T00:00:01Z\n",
            n = i / 50,
            a = i / 256 % 256,
            b = i % 256
        )
    }

    /// The YAML library's default budgets (1,024 documents, 250,000 nodes)
    /// refused a mid-size cluster that reads as JSON: budgets now scale
    /// with the file's size.
    #[test]
    fn a_yaml_list_of_1500_pods_reads_as_its_json_does() {
        let pods: String = (0..1500).map(kubectl_pod).collect();
        let yaml = format!("apiVersion: v1\nkind: List\nitems:\n{pods}");
        let from_yaml = parse_objects("big.yaml", &yaml).unwrap();
        assert_eq!(from_yaml.len(), 1500);
        let json = serde_json::to_string_pretty(&serde_json::json!({
            "apiVersion": "v1", "kind": "List",
            "items": from_yaml.iter().map(|o| o.object.clone()).collect::<Vec<_>>(),
        }))
        .unwrap();
        let from_json = parse_objects("big.json", &json).unwrap();
        assert_eq!(
            from_yaml.iter().map(|o| &o.object).collect::<Vec<_>>(),
            from_json.iter().map(|o| &o.object).collect::<Vec<_>>()
        );
        let (s, _) = {
            let dir = tempfile::tempdir().unwrap();
            let f = dir.path().join("big.yaml");
            std::fs::write(&f, &yaml).unwrap();
            read_snapshot_located(&f).unwrap()
        };
        assert_eq!(s.pods.len(), 1500);
        // 1,100 documents of one pod each: over the old 1,024-document budget.
        let docs: String = (0..1100)
            .map(|i| {
                format!(
                    "---\n{}",
                    kubectl_pod(i)
                        .replace("\n  ", "\n")
                        .trim_start_matches("- ")
                )
            })
            .collect();
        assert_eq!(parse_objects("docs.yaml", &docs).unwrap().len(), 1100);
    }

    /// Every item of a List is at its own line, in JSON as in YAML (they
    /// were all reported at the List's line).
    #[test]
    fn list_items_keep_their_own_lines() {
        let json = "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n  {\"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}},\n  {\"kind\": \"Pod\", \"metadata\": {\"name\": \"b\"}}\n]}\n";
        let lines: Vec<usize> = parse_objects("l.json", json)
            .unwrap()
            .iter()
            .map(|o| o.line)
            .collect();
        assert_eq!(lines, [2, 3]);
        let yaml = "apiVersion: v1\nkind: List\nitems:\n- kind: Pod\n  metadata: {name: a}\n- kind: Pod\n  metadata: {name: b}\n";
        let lines: Vec<usize> = parse_objects("l.yaml", yaml)
            .unwrap()
            .iter()
            .map(|o| o.line)
            .collect();
        assert_eq!(lines, [4, 6]);
        // A typed error inside the second item names its line and column.
        let bad = "{\"kind\": \"List\", \"items\": [\n  {\"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}},\n  {\"kind\": \"Pod\", \"metadata\": {\"name\": \"b\", \"labels\": 7}}\n]}\n";
        let items = items("l.json", bad).unwrap();
        let e = items[1]
            .decode::<SlimPod>("l.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("l.json:3:"), "{e}");
        assert!(e.contains("Pod/b: invalid type"), "{e}");
        assert!(!e.contains("error:"), "the caller prints the severity: {e}");
    }

    /// kubectl skips empty documents; a trailing `---` was a hard error.
    #[test]
    fn empty_documents_are_skipped() {
        let yaml = "---\nkind: Pod\nmetadata: {name: a}\n--- # only a comment\n---\nkind: Pod\nmetadata: {name: b}\n---\n";
        let o = parse_objects("e.yaml", yaml).unwrap();
        assert_eq!(o.len(), 2);
        assert_eq!(o[1].line, 6);
    }

    /// A budget error says which limit, at its line, with a hint; YAML
    /// bombs are still stopped.
    #[test]
    fn budget_errors_name_the_limit_and_give_a_hint() {
        let deep = format!("kind: Pod\nspec: {}{}\n", "[".repeat(100), "]".repeat(100));
        let d = match parse_objects("deep.yaml", &deep).unwrap_err() {
            ReadError::Invalid(d) => d,
            other => panic!("{other}"),
        };
        assert!(
            d.message
                .starts_with("depth limit: nesting deeper than 64 levels"),
            "{}",
            d.message
        );
        assert_eq!(d.line, 2);
        assert!(d.hint.is_some());
        let mut laughs = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (i, prev) in ["b", "c", "d", "e", "f", "g"]
            .iter()
            .zip(["a", "b", "c", "d", "e", "f"])
        {
            laughs.push_str(&format!("{i}: &{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        let d = parse_objects("laughs.yaml", &laughs)
            .unwrap_err()
            .diagnostic();
        assert!(d.message.starts_with("alias limit: "), "{}", d.message);
        assert!(d.hint.as_deref().is_some_and(|h| h.contains("alias")));
    }

    /// `1e400` is a quantity string in YAML (it overflows a float), not a
    /// "non-finite float" error.
    #[test]
    fn a_huge_unquoted_number_stays_a_string() {
        let o = parse_objects(
            "p.yaml",
            "kind: Pod\nmetadata: {name: a}\nspec:\n  overhead: {cpu: 1e400}\n",
        )
        .unwrap();
        assert_eq!(o[0].object["spec"]["overhead"]["cpu"], "1e400");
    }
}
