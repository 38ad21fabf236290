//! Reading a live cluster for `diff --cluster` and `snapshot`: the kube
//! client (kubeconfig or in-cluster config) and paged lists of the snapshot
//! kinds as plain JSON, as `kubectl get -o json` prints them. This is the
//! only place the CLI talks to an API server; everything it reads is then
//! handled like a file.
//!
//! Its tests answer through tower-test mocks.

use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// Objects per list request; larger collections are paged.
const PAGE_SIZE: u32 = 500;

/// A kind a snapshot holds: group, version, kind, plural.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

impl Kind {
    const fn new(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
    ) -> Self {
        Kind {
            group,
            version,
            kind,
            plural,
        }
    }

    fn api_resource(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group, self.version, self.kind),
            self.plural,
        )
    }

    fn api_version(self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

pub const NODE: Kind = Kind::new("", "v1", "Node", "nodes");
pub const NODECLAIM: Kind = Kind::new("karpenter.sh", "v1", "NodeClaim", "nodeclaims");
pub const NODEPOOL: Kind = Kind::new("karpenter.sh", "v1", "NodePool", "nodepools");
pub const EC2NODECLASS: Kind =
    Kind::new("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses");
pub const NODEOVERLAY: Kind = Kind::new("karpenter.sh", "v1alpha1", "NodeOverlay", "nodeoverlays");
pub const CAPACITYBUFFER: Kind = Kind::new(
    "autoscaling.x-k8s.io",
    "v1beta1",
    "CapacityBuffer",
    "capacitybuffers",
);

/// The kinds of a snapshot (CONVENTIONS.md), in the order they are written:
/// the state plan and diff read, then the workload controllers a forecast
/// recreates evicted pods with. `simulate --snapshot-out` writes the same
/// kinds in the same order (a test holds the two together).
pub const SNAPSHOT_KINDS: [Kind; 14] = [
    NODE,
    Kind::new("", "v1", "Pod", "pods"),
    NODECLAIM,
    NODEPOOL,
    EC2NODECLASS,
    Kind::new("apps", "v1", "DaemonSet", "daemonsets"),
    Kind::new(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
    ),
    Kind::new("", "v1", "PersistentVolume", "persistentvolumes"),
    Kind::new("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    Kind::new("storage.k8s.io", "v1", "StorageClass", "storageclasses"),
    Kind::new("apps", "v1", "Deployment", "deployments"),
    Kind::new("apps", "v1", "ReplicaSet", "replicasets"),
    Kind::new("apps", "v1", "StatefulSet", "statefulsets"),
    Kind::new("batch", "v1", "Job", "jobs"),
];

/// A failure to read the cluster (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot configure a Kubernetes client")]
    Connect(#[source] kube::Error),
    #[error("listing {kind} objects")]
    List {
        kind: &'static str,
        #[source]
        source: kube::Error,
    },
}

impl LiveError {
    /// A likely fix, printed as `hint:` after the error.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            LiveError::Runtime(_) => None,
            LiveError::Connect(_) => Some(
                "set KUBECONFIG or the current context (`kubectl config current-context`), or run inside a cluster",
            ),
            LiveError::List { .. } => Some(
                "check that the Karpenter CRDs are installed and that your credentials may list this kind (`kubectl auth can-i list <kind>`)",
            ),
        }
    }
}

/// A runtime for the client's requests.
pub fn runtime() -> Result<tokio::runtime::Runtime, LiveError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LiveError::Runtime)
}

/// A client from the usual kubeconfig or in-cluster configuration.
pub async fn connect() -> Result<Client, LiveError> {
    crate::cluster::kube_client::connect(None, None)
        .await
        .map_err(LiveError::Connect)
}

/// Every object of `kind`, all namespaces, page by page, each with its
/// `apiVersion` and `kind` (list items omit them) and without
/// `managedFields`.
pub async fn list(client: &Client, kind: Kind) -> Result<Vec<Value>, LiveError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.api_resource());
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(PAGE_SIZE);
    loop {
        let page = api.list(&params).await.map_err(|source| LiveError::List {
            kind: kind.kind,
            source,
        })?;
        for item in page.items {
            let mut value = serde_json::to_value(item).map_err(|e| LiveError::List {
                kind: kind.kind,
                source: kube::Error::SerdeError(e),
            })?;
            if let Some(object) = value.as_object_mut() {
                object.insert("apiVersion".into(), kind.api_version().into());
                object.insert("kind".into(), kind.kind.into());
                if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("managedFields");
                }
            }
            out.push(value);
        }
        match page.metadata.continue_.as_deref() {
            Some(token) if !token.is_empty() => params = params.continue_token(token),
            _ => break,
        }
    }
    Ok(out)
}

/// The objects of several kinds, in order.
pub async fn list_all(client: &Client, kinds: &[Kind]) -> Result<Vec<Value>, LiveError> {
    let mut out = Vec::new();
    for kind in kinds {
        out.extend(list(client, *kind).await?);
    }
    Ok(out)
}

/// A snapshot of the cluster: a `v1/List` of every snapshot kind.
pub async fn snapshot(client: &Client) -> Result<Value, LiveError> {
    let items = list_all(client, &SNAPSHOT_KINDS).await?;
    Ok(json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}))
}

#[cfg(test)]
pub(crate) mod tests {
    //! Against kube-rs's mocked API server (as `cluster::kube_cluster`'s
    //! tests do): the mock answers each expected list request in order.

    use bytes::Bytes;
    use http::{Method, Request, Response};
    use http_body_util::Full;
    use kube::client::Body;
    use tower_test::mock;

    use super::*;

    pub(crate) type Handle = mock::Handle<Request<Body>, Response<Full<Bytes>>>;

    pub(crate) fn mock_client() -> (Client, Handle) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Full<Bytes>>>();
        (Client::new(service, "default"), handle)
    }

    /// The collection path of a kind.
    pub(crate) fn path(kind: Kind) -> String {
        if kind.group.is_empty() {
            format!("/api/{}/{}", kind.version, kind.plural)
        } else {
            format!("/apis/{}/{}/{}", kind.group, kind.version, kind.plural)
        }
    }

    /// Expects a GET of `uri` and answers with a list of `items`, with
    /// `continue_token` set when there is a next page.
    pub(crate) async fn serve(
        handle: &mut Handle,
        uri: &str,
        items: Vec<Value>,
        next: Option<&str>,
    ) {
        let (request, send) = handle.next_request().await.expect("a request");
        assert_eq!(
            (request.method(), request.uri().to_string().as_str()),
            (&Method::GET, uri),
            "unexpected request"
        );
        let body = json!({
            "apiVersion": "v1", "kind": "List",
            "metadata": {"resourceVersion": "7", "continue": next.unwrap_or("")},
            "items": items,
        });
        send.send_response(
            Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap(),
        );
    }

    /// Answers the first list of each kind in `kinds` with `items_of(kind)`.
    pub(crate) async fn serve_kinds(
        handle: &mut Handle,
        kinds: &[Kind],
        items_of: impl Fn(Kind) -> Vec<Value>,
    ) {
        for kind in kinds {
            serve(
                handle,
                &format!("{}?&limit=500", path(*kind)),
                items_of(*kind),
                None,
            )
            .await;
        }
    }

    #[tokio::test]
    async fn lists_are_paged_typed_and_stripped_of_managed_fields() {
        let (client, mut handle) = mock_client();
        let server = tokio::spawn(async move {
            serve(
                &mut handle,
                "/api/v1/nodes?&limit=500",
                vec![json!({"metadata": {"name": "a", "managedFields": [{"manager": "kubelet"}]}})],
                Some("page2"),
            )
            .await;
            serve(
                &mut handle,
                "/api/v1/nodes?&limit=500&continue=page2",
                vec![json!({"metadata": {"name": "b"}})],
                None,
            )
            .await;
        });
        let nodes = list(&client, NODE).await.unwrap();
        server.await.unwrap();
        assert_eq!(
            nodes,
            [
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}}),
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b"}}),
            ]
        );
    }

    #[test]
    fn simulate_snapshot_out_writes_the_same_kinds_in_the_same_order() {
        assert_eq!(
            SNAPSHOT_KINDS.map(|k| k.kind),
            crate::simulate::snapshot::KINDS
        );
    }

    #[tokio::test]
    async fn a_snapshot_lists_every_kind_in_order() {
        let (client, mut handle) = mock_client();
        let server = tokio::spawn(async move {
            serve_kinds(&mut handle, &SNAPSHOT_KINDS, |k| {
                let mut object = json!({"metadata": {"name": format!("{}-1", k.plural)}});
                if k.kind == "NodeClaim" {
                    // What the CRD requires of every NodeClaim.
                    object["spec"] = json!({
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": [],
                    });
                }
                vec![object]
            })
            .await;
        });
        let snapshot = snapshot(&client).await.unwrap();
        server.await.unwrap();
        assert_eq!(snapshot["kind"], "List");
        let kinds: Vec<&str> = snapshot["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, SNAPSHOT_KINDS.map(|k| k.kind));
        assert_eq!(snapshot["items"][5]["apiVersion"], "apps/v1");
        // What it writes is what the snapshot reader reads.
        let text = snapshot.to_string();
        let objects = crate::snapshot::parse_objects("s.json", &text).unwrap();
        let read = crate::snapshot::snapshot_from_objects("s.json", &objects).unwrap();
        assert_eq!(
            (
                read.nodes.len(),
                read.nodeclaims.len(),
                read.storage_classes.len()
            ),
            (1, 1, 1)
        );
    }

    #[tokio::test]
    async fn a_refused_list_names_the_kind() {
        let (client, mut handle) = mock_client();
        let server = tokio::spawn(async move {
            let (_, send) = handle.next_request().await.expect("a request");
            let status = json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "nodeclaims.karpenter.sh is forbidden", "reason": "Forbidden", "code": 403
            });
            send.send_response(
                Response::builder()
                    .status(403)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(status.to_string())))
                    .unwrap(),
            );
        });
        let e = list(&client, NODECLAIM).await.unwrap_err();
        server.await.unwrap();
        assert_eq!(e.to_string(), "listing NodeClaim objects");
        assert!(e.hint().unwrap().contains("kubectl auth can-i"));
    }

    // ------------------------------------------------ the commands, end to end

    use crate::cli::args::{Cli, Command};

    /// Runs `argv` (a `diff --cluster` or `snapshot` command) against the
    /// mock, which `server` plays; returns the exit code, stdout and stderr.
    fn run_against(
        argv: &[&str],
        server: impl FnOnce(Handle) -> futures::future::BoxFuture<'static, ()>,
    ) -> (u8, String, String) {
        use clap::Parser;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (client, handle) = rt.block_on(async { mock_client() });
        let served = rt.spawn(server(handle));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut io = crate::cli::Io {
            out: &mut out,
            err: &mut err,
            out_is_terminal: false,
            err_is_terminal: false,
        };
        let cli =
            Cli::try_parse_from(std::iter::once("dovetail").chain(argv.iter().copied())).unwrap();
        let code = match cli.command {
            Command::Diff(a) => {
                let settings = crate::cli::diff::impact_settings_for_tests(&a);
                let forecast = crate::cli::forecast::settings(&a).unwrap();
                crate::cli::diff::run_cluster(&a, &mut io, settings, forecast, &rt, &client)
            }
            Command::Snapshot(a) => crate::cli::snapshot::write_snapshot(&a, &mut io, &rt, &client),
            other => panic!("not a cluster command: {other:?}"),
        };
        rt.block_on(served).unwrap();
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    /// `diff --cluster --forecast`: the live NodePools and EC2NodeClasses
    /// are A, the repository's B, and the cluster the snapshot's: here the
    /// fixture cluster of `tests/forecast.rs` after its run, served kind by
    /// kind, against a repository that pins its AMI.
    #[test]
    fn a_forecast_from_the_live_cluster_runs_its_configuration_against_the_repository() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let scenario =
            crate::simulate::scenario::load(&root.join("tests/fixtures/forecast/cluster.yaml"))
                .unwrap();
        let sim = crate::simulate::driver::Simulation::new(scenario, None).unwrap();
        let state = sim.cluster();
        sim.run(None).unwrap();
        let snapshot = crate::simulate::snapshot::snapshot(&state);
        let items: Vec<Value> = snapshot["items"].as_array().unwrap().clone();
        let of_kind = move |kind: &str| -> Vec<Value> {
            items
                .iter()
                .filter(|o| o["kind"] == kind)
                .cloned()
                .collect()
        };
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        std::fs::create_dir(dir.path().join("config")).unwrap();
        for f in ["default.yaml", "general.yaml"] {
            let text = std::fs::read_to_string(root.join("tests/fixtures/forecast/config").join(f))
                .unwrap()
                .replace("al2023@latest", "al2023@v20250601");
            std::fs::write(dir.path().join("config").join(f), text).unwrap();
        }
        let mut index = repo.index().unwrap();
        index
            .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
            .unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::new("t", "t@example.com", &git2::Time::new(1, 0)).unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "pin", &tree, &[])
            .unwrap();
        let config = dir.path().join("config");
        let argv = [
            "diff",
            config.to_str().unwrap(),
            "--cluster",
            "--forecast",
            "--for",
            "2h",
            "-o",
            "json",
        ];
        let (code, out, err) = run_against(&argv, move |mut handle| {
            Box::pin(async move {
                serve_kinds(&mut handle, &[NODEPOOL, EC2NODECLASS], |k| of_kind(k.kind)).await;
                serve_kinds(&mut handle, &SNAPSHOT_KINDS, |k| of_kind(k.kind)).await;
            })
        });
        assert_eq!(code, 1, "{out}{err}");
        let doc: Value = serde_json::from_str(&out).unwrap();
        let f = &doc["forecast"];
        assert_eq!(f["a"]["label"], "live cluster");
        assert_eq!(f["snapshot"], "(live cluster)");
        let drifted = |side: &Value| {
            side["disruptions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["reason"] == "Drifted")
                .map(|d| d["nodes"].as_u64().unwrap())
                .sum::<u64>()
        };
        assert_eq!(drifted(&f["a"]), 0, "the live configuration drifts nothing");
        assert_eq!(drifted(&f["b"]), f["nodes"].as_u64().unwrap(), "{f}");
    }

    /// `snapshot ARGS` against a cluster of one node and one pod.
    fn snapshot_with(args: &[&str]) -> (u8, String, String) {
        let argv: Vec<&str> = std::iter::once("snapshot")
            .chain(args.iter().copied())
            .collect();
        run_against(&argv, |mut handle| {
            Box::pin(async move {
                serve_kinds(&mut handle, &SNAPSHOT_KINDS, |k| match k.kind {
                    "Node" => vec![json!({"metadata": {"name": "ip-1", "labels": {"karpenter.sh/nodepool": "general"}}})],
                    "Pod" => vec![json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"containers": []}})],
                    _ => Vec::new(),
                })
                .await;
            })
        })
    }

    #[test]
    fn snapshot_writes_a_list_the_reader_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cluster.yaml");
        let (code, out, err) = snapshot_with(&["--out-file", file.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(out, "");
        assert!(err.contains("snapshot: 2 objects written to"), "{err}");
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("apiVersion: v1\n"),
            "YAML for .yaml: {text}"
        );
        let read = crate::snapshot::read_snapshot(&file).unwrap();
        assert_eq!((read.nodes.len(), read.pods.len()), (1, 1));
    }

    /// `-o` is the format, as everywhere else: `snapshot -o json` printed to
    /// a file named `json` before.
    #[test]
    fn snapshot_output_is_a_format_and_the_old_file_form_is_deprecated() {
        let dir = tempfile::tempdir().unwrap();
        let (code, out, err) = snapshot_with(&["-o", "json"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.starts_with("{\n"), "JSON on stdout: {out}");
        assert!(!std::path::Path::new("json").exists());
        let (code, out, _) = snapshot_with(&["--output", "yaml"]);
        assert_eq!(code, 0);
        assert!(out.starts_with("apiVersion: v1\n"), "{out}");
        let file = dir.path().join("c.data");
        let (code, _, err) = snapshot_with(&["-o", "yaml", "--out-file", file.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        assert!(
            std::fs::read_to_string(&file)
                .unwrap()
                .starts_with("apiVersion: v1\n")
        );
        let old = dir.path().join("old.yaml");
        let (code, out, err) = snapshot_with(&["--output", old.to_str().unwrap()]);
        assert_eq!((code, out.as_str()), (0, ""), "{err}");
        assert!(
            err.starts_with("note: `--output FILE` is deprecated: --output is the format; use `--output yaml --out-file "),
            "{err}"
        );
        assert!(
            std::fs::read_to_string(&old)
                .unwrap()
                .starts_with("apiVersion: v1\n")
        );
        let (code, _, err) = snapshot_with(&["-o", "xml", "--out-file", old.to_str().unwrap()]);
        assert_eq!(code, 2);
        assert_eq!(
            err,
            "error: --output takes a format, yaml or json, not \"xml\"\n"
        );
    }

    /// A snapshot never writes through a symlink at its file (a checked-out
    /// `cluster.yaml -> ~/.bashrc`); today's code followed it.
    #[cfg(unix)]
    #[test]
    fn snapshot_never_writes_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.path().join("cluster.yaml");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for args in [
            vec!["--out-file", link.to_str().unwrap()],
            vec!["--output", link.to_str().unwrap()],
        ] {
            let (code, _, err) = snapshot_with(&args);
            assert_eq!(code, 2, "{err}");
            assert!(err.contains("is a symlink"), "{err}");
            assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        }
    }

    /// A git repository with the EC2NodeClass `default` and NodePool
    /// `general` (alias `alias`, requirement on-demand) committed.
    fn repo(alias: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let git = git2::Repository::init(dir.path()).unwrap();
        std::fs::write(
            dir.path().join("config.yaml"),
            format!(
                "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n  amiSelectorTerms:\n    - alias: {alias}\n  role: KarpenterNodeRole\n  subnetSelectorTerms:\n    - tags: {{karpenter.sh/discovery: c}}\n  securityGroupSelectorTerms:\n    - tags: {{karpenter.sh/discovery: c}}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: general\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}\n  limits:\n    cpu: 100\n"
            ),
        )
        .unwrap();
        let mut index = git.index().unwrap();
        index.add_path(std::path::Path::new("config.yaml")).unwrap();
        let tree = git.find_tree(index.write_tree().unwrap()).unwrap();
        let sig =
            git2::Signature::new("t", "t@example.com", &git2::Time::new(1_700_000_000, 0)).unwrap();
        git.commit(Some("HEAD"), &sig, &sig, "config", &tree, &[])
            .unwrap();
        dir
    }

    /// The live objects: `general` as the API server returns it (status,
    /// server metadata, dovetail's annotations), an EC2NodeClass with
    /// `live_alias`, and a NodePool `legacy` the repository no longer has.
    fn live_config(group: &str, live_alias: &str) -> impl Fn(Kind) -> Vec<Value> {
        let (group, live_alias) = (group.to_string(), live_alias.to_string());
        move |k| match k.kind {
            "NodePool" => vec![
                json!({"metadata": {
                    "name": "general", "uid": "u1", "resourceVersion": "9", "generation": 2,
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                    "managedFields": [{"manager": "dovetail"}],
                    "annotations": {"dovetail.dev/revision": "main@sha1:abc"}
                }, "spec": {
                    "template": {"spec": {
                        "nodeClassRef": {"group": group, "kind": "EC2NodeClass", "name": "default"},
                        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                        "expireAfter": "720h"
                    }},
                    "limits": {"cpu": "100"},
                    "disruption": {"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "10%"}]}
                }, "status": {"nodes": 2}}),
                json!({"metadata": {"name": "legacy"}, "spec": {"template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": []
                }}}}),
            ],
            "EC2NodeClass" => vec![
                json!({"metadata": {"name": "default", "resourceVersion": "3"}, "spec": {
                "amiSelectorTerms": [{"alias": live_alias}],
                "role": "KarpenterNodeRole",
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}]
            }, "status": {"amis": [{"id": "ami-1", "requirements": []}]}}),
            ],
            "Node" => ["ip-1", "ip-2"]
                .iter()
                .map(|n| {
                    json!({"metadata": {"name": n, "labels": {
                    "karpenter.sh/nodepool": "general", "karpenter.sh/capacity-type": "on-demand"
                }}, "status": {"capacity": {"cpu": "4"}}})
                })
                .chain(std::iter::once(
                    json!({"metadata": {"name": "ip-3", "labels": {
                        "karpenter.sh/nodepool": "legacy"
                    }}}),
                ))
                .collect(),
            _ => Vec::new(),
        }
    }

    fn json_out(out: &str) -> Value {
        serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    #[test]
    fn diff_cluster_ignores_server_fields_and_reports_changes_and_impact() {
        let dir = repo("al2023@v20260101");
        let path = dir.path().to_str().unwrap().to_string();
        let (code, out, err) = run_against(
            &["diff", &path, "--cluster", "--impact", "--output", "json"],
            |mut handle| {
                Box::pin(async move {
                    let live = live_config("karpenter.k8s.aws", "al2023@latest");
                    serve_kinds(
                        &mut handle,
                        &[NODEPOOL, EC2NODECLASS, NODE, NODECLAIM],
                        live,
                    )
                    .await;
                })
            },
        );
        assert_eq!(code, 1, "{out}{err}");
        let doc = json_out(&out);
        assert_eq!(doc["schema_version"], 1);
        assert_eq!(doc["from"], json!({"cluster": true}));
        let changes: Vec<(String, String)> = doc["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["name"].as_str().unwrap().into(),
                    o["change"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert_eq!(
            changes,
            [
                ("default".to_string(), "changed".to_string()),
                ("general".to_string(), "unchanged".to_string()),
                ("legacy".to_string(), "deleted".to_string()),
            ],
            "{doc}"
        );
        assert_eq!(doc["objects"][2]["file"], "(live cluster)");
        assert_eq!(
            doc["objects"][0]["changed_paths"],
            json!(["spec.amiSelectorTerms[0].alias"])
        );
        // The live nodes: both of general's may drift on the new AMI; the
        // one of the deleted NodePool is drained.
        let impact = &doc["impact"];
        assert_eq!(
            impact["affected_nodes"],
            json!(["ip-1", "ip-2", "ip-3"]),
            "{impact}"
        );
        assert_eq!(impact["ec2nodeclasses"][0]["affected"][0]["certain"], false);
        assert_eq!(
            impact["nodepools"][1]["affected"][0]["reasons"][0]["code"],
            "nodepool_deleted"
        );
    }

    #[test]
    fn diff_cluster_evaluates_transition_rules_live_to_new() {
        let dir = repo("al2023@latest");
        let path = dir.path().to_str().unwrap().to_string();
        let (code, out, err) = run_against(&["diff", &path, "--cluster"], |mut handle| {
            Box::pin(async move {
                let live = live_config("example.com", "al2023@latest");
                serve_kinds(&mut handle, &[NODEPOOL, EC2NODECLASS], live).await;
            })
        });
        assert_eq!(code, 2, "{out}{err}");
        assert!(out.contains("diff live cluster -> HEAD ("), "{out}");
        assert!(out.contains("nodeClassRef.group is immutable"), "{out}");
    }
}
