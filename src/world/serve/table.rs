//! `meta.k8s.io/v1` Tables: what `kubectl get` asks for
//! (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`) and prints.
//! Built-in kinds get the columns of the API server's printers
//! (`pkg/printers/internalversion`); the Karpenter kinds get their CRDs'
//! `additionalPrinterColumns`; other kinds the default Name and Age.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::clock::Timestamp;

/// One column of a Table.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub kind: &'static str,
    pub format: &'static str,
    pub priority: i64,
    /// Where a CRD column's value is (`None` for built-in printers).
    pub path: Option<String>,
}

impl Column {
    fn new(name: &str, kind: &'static str, priority: i64) -> Column {
        Column {
            name: name.into(),
            kind,
            format: "",
            priority,
            path: None,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.kind,
            "format": self.format,
            "description": "",
            "priority": self.priority,
        })
    }
}

fn name_column() -> Column {
    Column {
        format: "name",
        ..Column::new("Name", "string", 0)
    }
}

/// The printer columns of each CRD served, read from the project's CRDs.
pub struct Printers {
    crd_columns: BTreeMap<String, Vec<Column>>,
}

const CRDS: [&str; 5] = [
    include_str!("../../../crds/karpenter.sh_nodepools.yaml"),
    include_str!("../../../crds/karpenter.sh_nodeclaims.yaml"),
    include_str!("../../../crds/karpenter.k8s.aws_ec2nodeclasses.yaml"),
    include_str!("../../../crds/karpenter.sh_nodeoverlays.yaml"),
    include_str!("../../../crds/autoscaling.x-k8s.io_capacitybuffers.yaml"),
];

impl Default for Printers {
    fn default() -> Self {
        Self::new()
    }
}

impl Printers {
    pub fn new() -> Printers {
        let mut crd_columns = BTreeMap::new();
        for text in CRDS {
            let Ok(crd) = serde_saphyr::from_str::<Value>(text) else {
                continue;
            };
            let Some(kind) = crd.pointer("/spec/names/kind").and_then(Value::as_str) else {
                continue;
            };
            let version = crd
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .and_then(|v| v.first());
            let mut columns = vec![name_column()];
            for c in version
                .and_then(|v| v.get("additionalPrinterColumns"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let kind = match c.get("type").and_then(Value::as_str) {
                    Some("integer") => "integer",
                    Some("number") => "number",
                    Some("boolean") => "boolean",
                    Some("date") => "date",
                    _ => "string",
                };
                columns.push(Column {
                    name: c
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .into(),
                    kind,
                    format: "",
                    priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    path: c.get("jsonPath").and_then(Value::as_str).map(Into::into),
                });
            }
            crd_columns.insert(kind.to_string(), columns);
        }
        Printers { crd_columns }
    }

    /// The columns for a kind.
    pub fn columns(&self, kind: &str) -> Vec<Column> {
        if let Some(c) = self.crd_columns.get(kind) {
            return c.clone();
        }
        let mut c = vec![name_column()];
        let s = |n: &str| Column::new(n, "string", 0);
        let wide = |n: &str| Column::new(n, "string", 1);
        match kind {
            "Pod" => c.extend([
                s("Ready"),
                s("Status"),
                s("Restarts"),
                s("Age"),
                wide("IP"),
                wide("Node"),
                wide("Nominated Node"),
                wide("Readiness Gates"),
            ]),
            "Node" => c.extend([
                s("Status"),
                s("Roles"),
                s("Age"),
                s("Version"),
                wide("Internal-IP"),
                wide("External-IP"),
                wide("OS-Image"),
                wide("Kernel-Version"),
                wide("Container-Runtime"),
            ]),
            "Namespace" => c.extend([s("Status"), s("Age")]),
            "Deployment" => c.extend([
                s("Ready"),
                Column::new("Up-to-date", "integer", 0),
                Column::new("Available", "integer", 0),
                s("Age"),
            ]),
            "ReplicaSet" => c.extend([
                Column::new("Desired", "integer", 0),
                Column::new("Current", "integer", 0),
                Column::new("Ready", "integer", 0),
                s("Age"),
            ]),
            "StatefulSet" => c.extend([s("Ready"), s("Age")]),
            "PodDisruptionBudget" => c.extend([
                s("Min Available"),
                s("Max Unavailable"),
                Column::new("Allowed Disruptions", "integer", 0),
                s("Age"),
            ]),
            "Lease" => c.extend([s("Holder"), s("Age")]),
            "ConfigMap" => c.extend([Column::new("Data", "integer", 0), s("Age")]),
            "Secret" => c.extend([s("Type"), Column::new("Data", "integer", 0), s("Age")]),
            "VolumeAttachment" => c.extend([
                s("Attacher"),
                s("PV"),
                s("Node"),
                Column::new("Attached", "boolean", 0),
                s("Age"),
            ]),
            _ => c.push(s("Age")),
        }
        c
    }

    /// The Table of `objects` (served JSON), with each row's object as
    /// `include` asks (`None`, `Metadata`, the default, or `Object`).
    pub fn table(
        &self,
        kind: &str,
        objects: &[Value],
        resource_version: &str,
        cont: Option<&str>,
        include: &str,
        now: Timestamp,
    ) -> Value {
        let columns = self.columns(kind);
        let rows: Vec<Value> = objects
            .iter()
            .map(|o| self.row(kind, &columns, o, include, now))
            .collect();
        let mut metadata = Map::new();
        metadata.insert("resourceVersion".into(), resource_version.into());
        if let Some(c) = cont {
            metadata.insert("continue".into(), c.into());
        }
        json!({
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
            "columnDefinitions": columns.iter().map(Column::to_json).collect::<Vec<_>>(),
            "rows": rows,
        })
    }

    fn row(
        &self,
        kind: &str,
        columns: &[Column],
        o: &Value,
        include: &str,
        now: Timestamp,
    ) -> Value {
        let name = o.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
        let age = age(o.pointer("/metadata/creationTimestamp"), now);
        let cells: Vec<Value> = if self.crd_columns.contains_key(kind) {
            columns
                .iter()
                .map(|c| match &c.path {
                    None => name.clone(),
                    Some(p) => crd_cell(o, p, c.kind, now),
                })
                .collect()
        } else {
            let mut cells = vec![name];
            cells.extend(builtin_cells(kind, o, age));
            cells
        };
        let object = match include {
            "None" => None,
            "Object" => Some(o.clone()),
            _ => Some(json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
            })),
        };
        let mut row = Map::new();
        row.insert("cells".into(), Value::Array(cells));
        if let Some(object) = object {
            row.insert("object".into(), object);
        }
        Value::Object(row)
    }
}

fn str_at<'a>(o: &'a Value, pointer: &str) -> Option<&'a str> {
    o.pointer(pointer).and_then(Value::as_str)
}

fn int_at(o: &Value, pointer: &str) -> i64 {
    o.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn none_if_empty(s: impl Into<String>) -> Value {
    let s = s.into();
    if s.is_empty() {
        "<none>".into()
    } else {
        s.into()
    }
}

fn builtin_cells(kind: &str, o: &Value, age: String) -> Vec<Value> {
    match kind {
        "Pod" => pod_cells(o, age),
        "Node" => node_cells(o, age),
        "Namespace" => vec![
            str_at(o, "/status/phase").unwrap_or("Active").into(),
            age.into(),
        ],
        "Deployment" => vec![
            format!(
                "{}/{}",
                int_at(o, "/status/readyReplicas"),
                o.pointer("/spec/replicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(1)
            )
            .into(),
            int_at(o, "/status/updatedReplicas").into(),
            int_at(o, "/status/availableReplicas").into(),
            age.into(),
        ],
        "ReplicaSet" => vec![
            o.pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1)
                .into(),
            int_at(o, "/status/replicas").into(),
            int_at(o, "/status/readyReplicas").into(),
            age.into(),
        ],
        "StatefulSet" => vec![
            format!(
                "{}/{}",
                int_at(o, "/status/readyReplicas"),
                o.pointer("/spec/replicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(1)
            )
            .into(),
            age.into(),
        ],
        "PodDisruptionBudget" => {
            let show = |p: &str| match o.pointer(p) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => "N/A".into(),
            };
            vec![
                show("/spec/minAvailable").into(),
                show("/spec/maxUnavailable").into(),
                int_at(o, "/status/disruptionsAllowed").into(),
                age.into(),
            ]
        }
        "Lease" => vec![
            none_if_empty(str_at(o, "/spec/holderIdentity").unwrap_or_default()),
            age.into(),
        ],
        "ConfigMap" => {
            let count = |p: &str| {
                o.pointer(p)
                    .and_then(Value::as_object)
                    .map_or(0, |m| m.len())
            };
            vec![(count("/data") + count("/binaryData")).into(), age.into()]
        }
        "Secret" => vec![
            str_at(o, "/type").unwrap_or("Opaque").into(),
            o.pointer("/data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len())
                .into(),
            age.into(),
        ],
        "VolumeAttachment" => vec![
            str_at(o, "/spec/attacher").unwrap_or_default().into(),
            str_at(o, "/spec/source/persistentVolumeName")
                .unwrap_or_default()
                .into(),
            str_at(o, "/spec/nodeName").unwrap_or_default().into(),
            o.pointer("/status/attached")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .into(),
            age.into(),
        ],
        _ => vec![age.into()],
    }
}

/// The cells of `kubectl get pods`, as `printPod` computes them.
fn pod_cells(o: &Value, age: String) -> Vec<Value> {
    let statuses = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let total = o
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = statuses
        .iter()
        .filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    let restarts: i64 = statuses
        .iter()
        .map(|s| s.get("restartCount").and_then(Value::as_i64).unwrap_or(0))
        .sum();
    let mut reason = str_at(o, "/status/reason")
        .or_else(|| str_at(o, "/status/phase"))
        .unwrap_or("Pending")
        .to_string();
    for s in statuses.iter().rev() {
        if let Some(r) = s
            .pointer("/state/waiting/reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            reason = r.into();
        } else if let Some(t) = s.pointer("/state/terminated") {
            reason = t
                .get("reason")
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_else(|| {
                    let code = t.get("exitCode").and_then(Value::as_i64).unwrap_or(0);
                    format!("ExitCode:{code}")
                });
        }
    }
    let node_lost = str_at(o, "/status/reason") == Some("NodeLost");
    if o.pointer("/metadata/deletionTimestamp").is_some() && !node_lost {
        reason = "Terminating".into();
    }
    vec![
        format!("{ready}/{total}").into(),
        reason.into(),
        restarts.to_string().into(),
        age.into(),
        none_if_empty(str_at(o, "/status/podIP").unwrap_or_default()),
        none_if_empty(str_at(o, "/spec/nodeName").unwrap_or_default()),
        none_if_empty(str_at(o, "/status/nominatedNodeName").unwrap_or_default()),
        "<none>".into(),
    ]
}

/// The cells of `kubectl get nodes`, as `printNode` computes them.
fn node_cells(o: &Value, age: String) -> Vec<Value> {
    let conditions = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ready = conditions
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"));
    let mut status = match ready.and_then(|c| c.get("status")).and_then(Value::as_str) {
        Some("True") => "Ready".to_string(),
        Some("False") => "NotReady".to_string(),
        _ => "Unknown".to_string(),
    };
    if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<String> = o
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                Some(role.to_string())
            } else if k == "kubernetes.io/role" {
                v.as_str().map(String::from)
            } else {
                None
            }
        })
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort();
    let address = |kind: &str| {
        o.pointer("/status/addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|a| a.get("type").and_then(Value::as_str) == Some(kind))
            .and_then(|a| a.get("address"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let info = |field: &str| {
        o.pointer(&format!("/status/nodeInfo/{field}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    vec![
        status.into(),
        none_if_empty(roles.join(",")),
        age.into(),
        info("kubeletVersion").into(),
        none_if_empty(address("InternalIP")),
        none_if_empty(address("ExternalIP")),
        none_if_empty(info("osImage")),
        none_if_empty(info("kernelVersion")),
        none_if_empty(info("containerRuntimeVersion")),
    ]
}

/// The age of an object as the printers show it.
fn age(created: Option<&Value>, now: Timestamp) -> String {
    match created
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<Timestamp>().ok())
    {
        Some(t) => human_duration(now.as_second() - t.as_second()),
        None => "<unknown>".into(),
    }
}

/// apimachinery's `duration.HumanDuration`, for whole seconds.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// One CRD printer cell: the first value the JSONPath finds, typed as the
/// column says, a `date` as an age (as the CRD table convertor does);
/// `null` when it finds nothing.
fn crd_cell(o: &Value, path: &str, kind: &str, now: Timestamp) -> Value {
    let Some(v) = jsonpath_first(o, path) else {
        return Value::Null;
    };
    match (kind, v) {
        ("date", v) => age(Some(v), now).into(),
        ("integer" | "number" | "boolean", v) => v.clone(),
        (_, Value::String(s)) => Value::String(s.clone()),
        (_, v) => Value::String(v.to_string()),
    }
}

/// The subset of JSONPath that printer columns use: `.field` steps
/// (`\.` escapes a dot in a key) and `[?(@.key=="value")]` filters.
pub fn jsonpath_first<'a>(o: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current: Vec<&Value> = vec![o];
    let mut rest = path.trim().trim_start_matches('{').trim_end_matches('}');
    rest = rest.strip_prefix('$').unwrap_or(rest);
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("[?(@.") {
            let end = r.find(")]")?;
            let (cond, after) = (&r[..end], &r[end + 2..]);
            let (key, value) = cond.split_once("==")?;
            let value = value.trim().trim_matches('"').trim_matches('\'');
            current = current
                .into_iter()
                .flat_map(|v| v.as_array().into_iter().flatten())
                .filter(|e| e.get(key.trim()).and_then(Value::as_str) == Some(value))
                .collect();
            rest = after;
        } else if let Some(r) = rest.strip_prefix('.') {
            let mut key = String::new();
            let mut chars = r.char_indices().peekable();
            let mut consumed = r.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            key.push(n);
                        }
                    }
                    '.' | '[' => {
                        consumed = i;
                        break;
                    }
                    c => key.push(c),
                }
            }
            current = current.into_iter().filter_map(|v| v.get(&key)).collect();
            rest = &r[consumed..];
        } else {
            return None;
        }
    }
    current.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        for (s, want) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (30 * 3600, "30h"),
            (50 * 3600, "2d2h"),
            (24 * 3600 * 10, "10d"),
            (24 * 3600 * 800, "2y70d"),
        ] {
            assert_eq!(human_duration(s), want, "{s}");
        }
    }

    #[test]
    fn printer_column_paths_find_escaped_keys_and_filtered_conditions() {
        let o = json!({
            "metadata": {"labels": {"node.kubernetes.io/instance-type": "m5.large"}},
            "status": {"conditions": [
                {"type": "Launched", "status": "True"},
                {"type": "Ready", "status": "False"}
            ]}
        });
        assert_eq!(
            jsonpath_first(&o, r".metadata.labels.node\.kubernetes\.io/instance-type"),
            Some(&json!("m5.large"))
        );
        assert_eq!(
            jsonpath_first(&o, r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(&json!("False"))
        );
        assert_eq!(jsonpath_first(&o, ".status.nodeName"), None);
    }

    #[test]
    fn crd_tables_use_the_crds_printer_columns() {
        let p = Printers::new();
        let names: Vec<String> = p
            .columns("NodeClaim")
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(
            &names[..7],
            ["Name", "Type", "Capacity", "Zone", "Node", "Ready", "Age"]
        );
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let node = json!({
            "metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"node-role.kubernetes.io/worker": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"kubeletVersion": "v1.33.0"}}
        });
        let t = p.table("Node", &[node], "7", None, "Metadata", now);
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "n1",
                "Ready,SchedulingDisabled",
                "worker",
                "10m",
                "v1.33.0",
                "<none>",
                "<none>",
                "<none>",
                "<none>",
                "<none>"
            ])
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        let pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:09:00Z",
                         "deletionTimestamp": "2026-01-01T00:10:30Z"},
            "spec": {"containers": [{"name": "a"}], "nodeName": "n1"},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}]}
        });
        let t = p.table("Pod", &[pod], "7", None, "None", now);
        assert_eq!(
            t["rows"][0]["cells"].as_array().unwrap()[1..5],
            json!(["1/1", "Terminating", "2", "60s"])
                .as_array()
                .unwrap()[..]
        );
        assert!(t["rows"][0].get("object").is_none());
    }
}
