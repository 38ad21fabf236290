//! `deploy/`: the kustomize base renders (with `kubectl kustomize`, offline)
//! into valid Kubernetes objects, its CRDs are the generated ones, its pod
//! is hardened, its dovetail command lines and `DOVETAIL_*` variables are
//! the CLI's, its RBAC rules grant exactly what the controller does, and
//! the image builds from what the binary compiles in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::{CommandFactory, Parser};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn typed<K: serde::de::DeserializeOwned>(file: &str, doc: &Value) -> K {
    serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{file}: {}: {e}", dovetail::diag::kind_name(doc)))
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `kubectl kustomize DIR`, or `None` (said loudly) when kubectl is not
/// installed.
fn kustomize(dir: &Path) -> Option<Vec<Value>> {
    let out = match Command::new("kubectl").arg("kustomize").arg(dir).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::missing(&format!(
                "kubectl is not installed, so `kubectl kustomize {}` cannot be checked \
                 (.ci/run puts the testbed's on PATH)",
                dir.display()
            ));
            return None;
        }
        Err(e) => panic!("kubectl: {e}"),
    };
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 output");
    Some(serde_saphyr::from_multiple(&text).expect("rendered YAML"))
}

/// The rendered base, by kind.
struct Rendered {
    namespaces: Vec<Namespace>,
    accounts: Vec<ServiceAccount>,
    cluster_roles: Vec<ClusterRole>,
    cluster_bindings: Vec<ClusterRoleBinding>,
    roles: Vec<Role>,
    bindings: Vec<RoleBinding>,
    deployments: Vec<Deployment>,
    budgets: Vec<PodDisruptionBudget>,
    services: Vec<Service>,
    configmaps: Vec<ConfigMap>,
    policies: Vec<NetworkPolicy>,
    crds: Vec<CustomResourceDefinition>,
}

fn render_base() -> Option<Rendered> {
    let docs = kustomize(&root().join("deploy"))?;
    let mut r = Rendered {
        namespaces: vec![],
        accounts: vec![],
        cluster_roles: vec![],
        cluster_bindings: vec![],
        roles: vec![],
        bindings: vec![],
        deployments: vec![],
        budgets: vec![],
        services: vec![],
        configmaps: vec![],
        policies: vec![],
        crds: vec![],
    };
    let file = "kubectl kustomize deploy/";
    for doc in &docs {
        match doc["kind"].as_str().unwrap_or_default() {
            "Namespace" => r.namespaces.push(typed(file, doc)),
            "ServiceAccount" => r.accounts.push(typed(file, doc)),
            "ClusterRole" => r.cluster_roles.push(typed(file, doc)),
            "ClusterRoleBinding" => r.cluster_bindings.push(typed(file, doc)),
            "Role" => r.roles.push(typed(file, doc)),
            "RoleBinding" => r.bindings.push(typed(file, doc)),
            "Deployment" => r.deployments.push(typed(file, doc)),
            "PodDisruptionBudget" => r.budgets.push(typed(file, doc)),
            "Service" => r.services.push(typed(file, doc)),
            "ConfigMap" => r.configmaps.push(typed(file, doc)),
            "NetworkPolicy" => r.policies.push(typed(file, doc)),
            "CustomResourceDefinition" => r.crds.push(typed(file, doc)),
            other => panic!("{file}: unexpected kind {other:?}"),
        }
        // Everything namespaced lands in dovetail's namespace.
        if let Some(ns) = doc.pointer("/metadata/namespace") {
            assert_eq!(ns, "dovetail", "{}", dovetail::diag::kind_name(doc));
        }
    }
    Some(r)
}

/// The checked-in CRDs, by name.
fn generated_crds() -> BTreeMap<String, CustomResourceDefinition> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(root().join("crds")).expect("crds/") {
        let path = entry.expect("entry").path();
        for doc in yaml_docs(&path) {
            let crd: CustomResourceDefinition = typed(&path.display().to_string(), &doc);
            out.insert(crd.metadata.name.clone().expect("a name"), crd);
        }
    }
    out
}

#[test]
fn the_kustomize_base_renders_into_typed_objects_with_the_generated_crds() {
    let Some(r) = render_base() else { return };
    let count = |name: &str, n: usize, want: usize| assert_eq!(n, want, "{name} rendered");
    count("Namespace", r.namespaces.len(), 1);
    count("ServiceAccount", r.accounts.len(), 1);
    count("ClusterRole", r.cluster_roles.len(), 1);
    count("ClusterRoleBinding", r.cluster_bindings.len(), 1);
    count("Role", r.roles.len(), 1);
    count("RoleBinding", r.bindings.len(), 1);
    count("Deployment", r.deployments.len(), 1);
    count("PodDisruptionBudget", r.budgets.len(), 1);
    count("Service", r.services.len(), 1);
    count("ConfigMap", r.configmaps.len(), 1);
    count("NetworkPolicy", r.policies.len(), 1);

    let rendered: BTreeMap<String, CustomResourceDefinition> = r
        .crds
        .iter()
        .map(|c| (c.metadata.name.clone().expect("a name"), c.clone()))
        .collect();
    assert_eq!(
        rendered,
        generated_crds(),
        "the rendered CRDs are not crds/"
    );

    // The ServiceAccount mounts no token (the controller's container
    // mounts its own, see check_deployment), names no IAM role (EKS Pod
    // Identity needs none; IRSA's annotation is the user's), and every
    // binding gives its role to it.
    let sa = &r.accounts[0];
    let sa_name = sa.metadata.name.as_deref().expect("a name");
    assert_eq!(sa.automount_service_account_token, Some(false));
    assert!(
        sa.metadata
            .annotations
            .as_ref()
            .is_none_or(|a| a.is_empty()),
        "the ServiceAccount carries a placeholder annotation: {:?}",
        sa.metadata.annotations
    );
    let subjects_ok = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.iter().flatten().all(|s| {
            s.kind == "ServiceAccount"
                && s.name == sa_name
                && s.namespace.as_deref() == Some("dovetail")
        }) && subjects.as_ref().is_some_and(|s| !s.is_empty())
    };
    let cb = &r.cluster_bindings[0];
    assert!(subjects_ok(&cb.subjects), "{cb:?}");
    assert_eq!(cb.role_ref.kind, "ClusterRole");
    assert_eq!(
        Some(&cb.role_ref.name),
        r.cluster_roles[0].metadata.name.as_ref()
    );
    let b = &r.bindings[0];
    assert!(subjects_ok(&b.subjects), "{b:?}");
    assert_eq!(b.role_ref.kind, "Role");
    assert_eq!(Some(&b.role_ref.name), r.roles[0].metadata.name.as_ref());

    check_deployment(&r.deployments[0], sa_name, &r.configmaps);

    // The PodDisruptionBudget and the Service select the controller's pods,
    // and the Service's port is the metrics port.
    let d = &r.deployments[0];
    let template = &d.spec.template;
    let pod_labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let matches = |selector: &BTreeMap<String, String>| {
        !selector.is_empty() && selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v))
    };
    let pdb = r.budgets[0].spec.as_ref().expect("PDB spec");
    let pdb_selector = pdb
        .selector
        .as_ref()
        .and_then(|s| s.match_labels.clone())
        .unwrap_or_default();
    assert!(matches(&pdb_selector), "the PDB selects no controller pod");
    assert!(
        pdb.max_unavailable.is_some() || pdb.min_available.is_some(),
        "the PDB allows any disruption"
    );
    let svc = r.services[0].spec.as_ref().expect("Service spec");
    assert!(
        matches(&svc.selector.clone().unwrap_or_default()),
        "the Service selects no controller pod"
    );
    let controller = controller_container(d);
    let metrics_port = controller
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("http-metrics"))
        .expect("the controller has a port named http-metrics");
    let port = &svc.ports.as_ref().expect("ports")[0];
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    assert!(
        matches!(&port.target_port, Some(IntOrString::String(n)) if n == "http-metrics")
            || port.target_port == Some(IntOrString::Int(metrics_port.container_port)),
        "the Service does not target the metrics port: {port:?}"
    );

    // The NetworkPolicy selects the pods and lets in exactly the ports
    // they declare (metrics and health), both ways policed.
    let policy = r.policies[0].spec.as_ref().expect("NetworkPolicy spec");
    assert!(
        matches(
            &policy
                .pod_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone())
                .unwrap_or_default()
        ),
        "the NetworkPolicy selects no controller pod"
    );
    assert_eq!(
        policy.policy_types.as_deref(),
        Some(&["Ingress".to_string(), "Egress".to_string()][..])
    );
    let declared: BTreeSet<String> = template
        .spec
        .iter()
        .flat_map(|p| &p.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| p.name.clone())
        .collect();
    let allowed: BTreeSet<String> = policy
        .ingress
        .iter()
        .flatten()
        .flat_map(|rule| {
            assert!(rule.from.is_none(), "ingress by port, from anywhere");
            rule.ports.iter().flatten()
        })
        .map(|p| match &p.port {
            Some(IntOrString::String(name)) => name.clone(),
            other => panic!("ingress names its ports: {other:?}"),
        })
        .collect();
    assert_eq!(allowed, declared, "ingress is not the declared ports");
    let egress_ports: BTreeSet<i32> = policy
        .egress
        .iter()
        .flatten()
        .flat_map(|rule| rule.ports.iter().flatten())
        .map(|p| match &p.port {
            Some(IntOrString::Int(n)) => *n,
            other => panic!("egress by port number: {other:?}"),
        })
        .collect();
    assert_eq!(egress_ports, BTreeSet::from([53, 80, 443]));
}

fn controller_container(d: &Deployment) -> &Container {
    let spec = d.spec.template.spec.as_ref().expect("pod spec");
    spec.containers
        .iter()
        .find(|c| {
            c.args
                .as_ref()
                .and_then(|a| a.first())
                .is_some_and(|a| a == "controller")
        })
        .expect("a container running `dovetail controller`")
}

/// Two replicas of `dovetail controller` with a git-sync sidecar sharing the
/// config volume; a hardened pod; probes on /healthz and /readyz; the
/// command line parses and every `DOVETAIL_*` variable is a flag's.
fn check_deployment(d: &Deployment, service_account: &str, configmaps: &[ConfigMap]) {
    let spec = &d.spec;
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.as_ref().expect("pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some(service_account));
    let psc = pod
        .security_context
        .as_ref()
        .expect("a pod securityContext");
    assert_eq!(psc.run_as_non_root, Some(true));
    assert!(psc.run_as_user.is_some_and(|u| u != 0));
    assert_eq!(
        psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );

    for c in &pod.containers {
        let sc = c
            .security_context
            .as_ref()
            .unwrap_or_else(|| panic!("container {} has no securityContext", c.name));
        assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", c.name);
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(
            sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_string()]),
            "{}",
            c.name
        );
        assert!(
            sc.run_as_user != Some(0) && sc.privileged != Some(true),
            "{}",
            c.name
        );
        let res = c
            .resources
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no resources", c.name));
        for (what, map) in [("requests", &res.requests), ("limits", &res.limits)] {
            let map = map
                .as_ref()
                .unwrap_or_else(|| panic!("{}: no {what}", c.name));
            assert!(
                map.contains_key("cpu") && map.contains_key("memory"),
                "{}: {what} lack cpu or memory",
                c.name
            );
        }
    }

    let controller = controller_container(d);
    assert!(
        controller.command.is_none(),
        "the image's entrypoint runs dovetail"
    );
    // The controller's environment: its own variables and the ConfigMaps
    // it takes whole.
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for from in controller.env_from.iter().flatten() {
        let name = from
            .config_map_ref
            .as_ref()
            .map(|r| r.name.clone())
            .expect("envFrom names a ConfigMap");
        let cm = configmaps
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("envFrom names {name}, which is not rendered"));
        env.extend(cm.data.clone().unwrap_or_default());
    }
    for e in controller.env.iter().flatten() {
        env.insert(e.name.clone(), e.value.clone().unwrap_or_default());
    }
    let ours: BTreeMap<&String, &String> = env
        .iter()
        .filter(|(k, _)| k.starts_with("DOVETAIL_"))
        .collect();
    assert!(
        !ours.is_empty(),
        "the controller is configured by DOVETAIL_* variables"
    );

    // Every DOVETAIL_* variable is a flag's; the command line, with the
    // variables as the flags they stand for, parses.
    let cli = dovetail::cli::args::Cli::command();
    let sub = cli
        .find_subcommand("controller")
        .expect("a `controller` subcommand");
    let flags: BTreeMap<String, &clap::Arg> = sub
        .get_arguments()
        .filter_map(|a| Some((a.get_env()?.to_string_lossy().into_owned(), a)))
        .collect();
    let mut argv: Vec<String> = std::iter::once("dovetail".to_string())
        .chain(controller.args.clone().unwrap_or_default())
        .collect();
    for (name, value) in &ours {
        let Some(arg) = flags.get(name.as_str()) else {
            panic!(
                "{name} is no flag's variable; `dovetail controller` reads {:?}",
                flags.keys().collect::<Vec<_>>()
            );
        };
        let long = arg.get_long().expect("a long flag");
        if arg.get_action().takes_values() {
            argv.push(format!("--{long}={value}"));
        } else if value.as_str() == "true" {
            argv.push(format!("--{long}"));
        }
    }
    if let Err(e) = dovetail::cli::args::Cli::try_parse_from(&argv) {
        panic!("the controller's command line {argv:?} does not parse: {e}");
    }

    // Probes: liveness on /healthz, readiness on /readyz, on a port the
    // container declares.
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let ports = controller.ports.clone().unwrap_or_default();
    for (probe, path) in [
        (&controller.liveness_probe, "/healthz"),
        (&controller.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("no HTTP probe on {path}"));
        assert_eq!(get.path.as_deref(), Some(path));
        assert!(
            ports.iter().any(|p| match &get.port {
                IntOrString::Int(n) => p.container_port == *n,
                IntOrString::String(s) => p.name.as_deref() == Some(s),
            }),
            "the {path} probe's port is not declared"
        );
    }
    // The ports the container declares are the ones the flags set.
    let port_of = |name: &str| {
        ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port.to_string())
    };
    let env_of = |name: &str| env.get(name).cloned();
    assert_eq!(env_of("DOVETAIL_METRICS_PORT"), port_of("http-metrics"));
    assert_eq!(env_of("DOVETAIL_HEALTH_PORT"), port_of("http-health"));

    // git-sync writes the checkout the controller reads.
    let sync = pod
        .containers
        .iter()
        .find(|c| c.image.as_deref().is_some_and(|i| i.contains("git-sync")))
        .expect("a git-sync container");
    let sync_env = |name: &str| {
        sync.env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
            .unwrap_or_else(|| panic!("git-sync has no {name}"))
    };
    let mount = |c: &Container, volume: &str| {
        c.volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == volume)
            .map(|m| (m.mount_path.clone(), m.read_only.unwrap_or(false)))
    };
    let sync_root = sync_env("GITSYNC_ROOT");
    let volume = sync
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == sync_root)
        .map(|m| m.name.clone())
        .expect("git-sync's root is a mounted volume");
    // git-sync's probes are on its HTTP endpoint, the port it binds.
    let sync_port = sync
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("git-sync-http"))
        .expect("git-sync declares its HTTP port");
    assert_eq!(
        sync_env("GITSYNC_HTTP_BIND"),
        format!(":{}", sync_port.container_port)
    );
    for probe in [&sync.liveness_probe, &sync.readiness_probe] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("git-sync has HTTP probes");
        assert_eq!(get.port, IntOrString::String("git-sync-http".into()));
    }
    for c in &pod.containers {
        assert_eq!(
            c.image_pull_policy.as_deref(),
            Some("IfNotPresent"),
            "{}",
            c.name
        );
    }
    // No container gets the ServiceAccount's token but the controller,
    // which mounts it where the in-cluster client reads it.
    assert_eq!(pod.automount_service_account_token, Some(false));
    let token_mount = "/var/run/secrets/kubernetes.io/serviceaccount";
    let token_volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| {
            v.projected.as_ref().is_some_and(|p| {
                p.sources
                    .iter()
                    .flatten()
                    .any(|s| s.service_account_token.is_some())
            })
        })
        .expect("a projected ServiceAccount token");
    for c in &pod.containers {
        let mounted = mount(c, &token_volume.name);
        if c.name == controller.name {
            assert_eq!(mounted, Some((token_mount.to_string(), true)));
        } else {
            assert_eq!(mounted, None, "{} mounts the token", c.name);
        }
    }

    let (path, read_only) = mount(controller, &volume).expect("the controller mounts the checkout");
    assert!(read_only, "the controller mounts the checkout read-only");
    let checkout = format!("{path}/{}", sync_env("GITSYNC_LINK"));
    assert_eq!(
        env_of("DOVETAIL_CONFIG_REPO"),
        Some(checkout),
        "the controller reads git-sync's link"
    );
}

#[test]
fn deploy_crds_are_the_generated_crds_file_for_file() {
    let list = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect()
    };
    let (generated, copied) = (root().join("crds"), root().join("deploy/crds"));
    assert_eq!(
        list(&copied),
        list(&generated),
        "deploy/crds/ holds other files than crds/: `cp crds/*.yaml deploy/crds/`"
    );
    let kustomization = yaml_docs(&root().join("deploy/kustomization.yaml"));
    let resources: BTreeSet<String> = kustomization[0]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect();
    for name in list(&generated) {
        let read = |dir: &Path| std::fs::read(dir.join(&name)).expect("readable");
        assert!(
            read(&copied) == read(&generated),
            "deploy/crds/{name} differs from crds/{name}: `cp crds/*.yaml deploy/crds/`"
        );
        assert!(
            resources.contains(&format!("crds/{name}")),
            "deploy/kustomization.yaml does not list crds/{name}"
        );
    }
}

/// The optional ServiceMonitor component renders into an overlay of the
/// base, and scrapes the Service's metrics port.
#[test]
fn the_servicemonitor_component_scrapes_the_metrics_service() {
    let dir = tempfile::tempdir().expect("tempdir");
    crate::support::deploy_overlay(dir.path(), &["servicemonitor"]);
    let Some(docs) = kustomize(dir.path()) else {
        return;
    };
    let monitors: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ServiceMonitor")
        .collect();
    assert_eq!(monitors.len(), 1, "one ServiceMonitor");
    let m = monitors[0];
    assert_eq!(m["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(m["metadata"]["namespace"], "dovetail");
    let service = docs
        .iter()
        .find(|d| d["kind"] == "Service")
        .expect("the Service");
    let selector = m["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    assert!(!selector.is_empty());
    for (k, v) in selector {
        assert_eq!(
            &service["metadata"]["labels"][k], v,
            "the ServiceMonitor selects {k}"
        );
    }
    let port = &m["spec"]["endpoints"][0]["port"];
    assert!(
        service["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| &p["name"] == port),
        "the ServiceMonitor scrapes port {port}, which the Service does not name"
    );
    assert_eq!(m["spec"]["endpoints"][0]["path"], "/metrics");
    // Scraped as job "karpenter", the job Karpenter's dashboards select.
    let relabel = &m["spec"]["endpoints"][0]["relabelings"][0];
    assert_eq!(
        (&relabel["targetLabel"], &relabel["replacement"]),
        (&Value::from("job"), &Value::from("karpenter"))
    );
    // Without the component, the base needs no Prometheus operator.
    let base_only = kustomize(&root().join("deploy")).expect("rendered above");
    assert!(base_only.iter().all(|d| d["kind"] != "ServiceMonitor"));
}

/// `deploy/dovetail-sync.yaml`, the sync-only install, outside the base.
#[test]
fn the_sync_only_manifest_is_valid_and_its_dovetail_args_parse() {
    let file = "deploy/dovetail-sync.yaml";
    let mut dovetail_containers = 0;
    for doc in &yaml_docs(&root().join(file)) {
        match doc["kind"].as_str().unwrap_or_default() {
            "Namespace" => drop(typed::<Namespace>(file, doc)),
            "ServiceAccount" => drop(typed::<ServiceAccount>(file, doc)),
            "ClusterRole" => drop(typed::<ClusterRole>(file, doc)),
            "ClusterRoleBinding" => drop(typed::<ClusterRoleBinding>(file, doc)),
            "Role" => drop(typed::<Role>(file, doc)),
            "RoleBinding" => drop(typed::<RoleBinding>(file, doc)),
            "Deployment" => {
                let d: Deployment = typed(file, doc);
                let spec = d.spec.template.spec.expect("pod spec");
                for c in spec.containers {
                    if !c.image.unwrap_or_default().starts_with("dovetail") {
                        continue;
                    }
                    dovetail_containers += 1;
                    let argv =
                        std::iter::once("dovetail".to_string()).chain(c.args.unwrap_or_default());
                    if let Err(e) = dovetail::cli::args::Cli::try_parse_from(argv) {
                        panic!("{file}: container {}: {e}", c.name);
                    }
                }
            }
            other => panic!("{file}: unexpected kind {other:?}"),
        }
    }
    assert!(dovetail_containers > 0, "no dovetail container in {file}");
}

/// The CloudFormation template routes the four kinds of interruption
/// events to its queue, which EventBridge may write to.
#[test]
fn the_interruption_stack_routes_every_event_kind_to_its_queue() {
    let path = root().join("deploy/cloudformation/interruption-queue.yaml");
    let text = std::fs::read_to_string(&path).expect("the template");
    // CloudFormation's short-form tags (!Ref, !GetAtt, !Sub) are not YAML
    // a generic parser takes; read them as the long form's strings.
    let text = text
        .replace("!GetAtt ", "GetAtt:")
        .replace("!Ref ", "Ref:")
        .replace("!Sub ", "");
    let t: Value = serde_saphyr::from_str(&text).expect("YAML");
    let resources = t["Resources"].as_object().expect("Resources");
    let of_type = |ty: &str| -> Vec<(&String, &Value)> {
        resources.iter().filter(|(_, r)| r["Type"] == ty).collect()
    };
    let queues = of_type("AWS::SQS::Queue");
    assert_eq!(queues.len(), 1, "one queue");
    let queue = queues[0].0.clone();
    let mut detail_types = BTreeSet::new();
    for (name, rule) in of_type("AWS::Events::Rule") {
        let pattern = &rule["Properties"]["EventPattern"];
        for d in pattern["detail-type"].as_array().expect("detail-type") {
            detail_types.insert(format!(
                "{}: {}",
                pattern["source"][0].as_str().unwrap(),
                d.as_str().unwrap()
            ));
        }
        let target = rule["Properties"]["Targets"][0]["Arn"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(
            target,
            format!("GetAtt:{queue}.Arn"),
            "{name} targets the queue"
        );
    }
    let want: BTreeSet<String> = [
        "aws.ec2: EC2 Spot Instance Interruption Warning",
        "aws.ec2: EC2 Instance Rebalance Recommendation",
        "aws.ec2: EC2 Instance State-change Notification",
        "aws.health: AWS Health Event",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    assert_eq!(detail_types, want);
    let policies = of_type("AWS::SQS::QueuePolicy");
    assert_eq!(policies.len(), 1, "one queue policy");
    let p = &policies[0].1["Properties"];
    assert_eq!(p["Queues"][0], format!("Ref:{queue}"));
    assert!(
        p["PolicyDocument"]["Statement"]
            .as_array()
            .expect("statements")
            .iter()
            .any(|s| s["Effect"] == "Allow"
                && s["Action"] == "sqs:SendMessage"
                && s["Principal"]["Service"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|p| p == "events.amazonaws.com"))),
        "EventBridge may not send to the queue"
    );
}

/// Every file the binary compiles in (`include_str!`) is copied into the
/// image's build stage, and every path the Dockerfile copies exists.
#[test]
fn the_dockerfile_copies_what_the_build_reads_and_runs_as_non_root() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).expect("Dockerfile");
    let mut copied = Vec::new();
    for line in dockerfile.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("COPY ") else {
            continue;
        };
        if rest.starts_with("--from") {
            continue;
        }
        let parts: Vec<&str> = rest.split_whitespace().collect();
        for src in &parts[..parts.len() - 1] {
            assert!(
                root().join(src).exists(),
                "the Dockerfile copies {src}, which does not exist"
            );
            copied.push(src.trim_end_matches('/').to_string());
        }
    }
    let include = regex::Regex::new(r#"include_(?:str|bytes)!\("([^"]+)"\)"#).unwrap();
    let mut files = Vec::new();
    collect_rs(&root().join("src"), &mut files);
    let mut missing = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        // Unit tests are not built into the image.
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        for c in include.captures_iter(text) {
            let target = file.parent().expect("dir").join(&c[1]);
            let target = normalize(&target);
            let rel = target
                .strip_prefix(root())
                .expect("inside the crate")
                .to_path_buf();
            let rel = rel.to_string_lossy().into_owned();
            if !copied
                .iter()
                .any(|c| rel == *c || rel.starts_with(&format!("{c}/")))
            {
                missing.insert(rel);
            }
        }
    }
    assert!(missing.is_empty(), "the image's build lacks {missing:?}");
    let user = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("USER "))
        .expect("a USER");
    assert!(
        !user.starts_with("0") && !user.starts_with("root"),
        "the image runs as {user}"
    );
    let last_from = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("FROM "))
        .expect("a FROM");
    assert!(
        last_from.contains("distroless"),
        "the runtime stage is {last_from}"
    );
    // The binary ships stripped (about 53 MB, not 495 MB with line tables).
    let build = dockerfile
        .split("cargo build --release")
        .next()
        .and_then(|before| before.rsplit("RUN ").next())
        .expect("a release build");
    assert!(
        build.contains("CARGO_PROFILE_RELEASE_STRIP=symbols"),
        "the image's binary is not stripped: {build}"
    );
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

// ---------------------------------------------------------------------------
// RBAC

/// One permission: a verb on `resource` (with `/subresource`) of a group.
type Grant = (String, String, String);

use dovetail::cloud::aws::config::KUBE_DNS_SERVICE;

/// What the rules of `deploy/rbac.yaml` grant, and where (`ClusterRole` or
/// `Role`).
fn granted() -> BTreeMap<Grant, &'static str> {
    let mut out = BTreeMap::new();
    let file = "deploy/rbac.yaml";
    let mut add = |rules: Option<Vec<PolicyRule>>, scope: &'static str| {
        for rule in rules.into_iter().flatten() {
            // One rule names its object: the kube-dns Service, read once
            // at start (`cloud::aws::config::kube_dns_ip`).
            let kube_dns = rule.resources.as_deref() == Some(&["services".to_string()][..])
                && rule.resource_names.as_deref() == Some(&[KUBE_DNS_SERVICE.to_string()][..])
                && rule.verbs == ["get"];
            assert!(
                (rule.resource_names.is_none() || kube_dns) && rule.non_resource_urls.is_none(),
                "{file}: rules name resources, not objects or URLs: {rule:?}"
            );
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    for verb in &rule.verbs {
                        assert!(
                            ![group, resource, verb].iter().any(|s| s.contains('*')),
                            "{file}: a wildcard grants more than the code uses: {rule:?}"
                        );
                        let grant = (verb.clone(), group.clone(), resource.clone());
                        assert!(
                            out.insert(grant.clone(), scope).is_none(),
                            "{file}: {grant:?} is granted twice"
                        );
                    }
                }
            }
        }
    };
    for doc in yaml_docs(&root().join(file)) {
        match doc["kind"].as_str().unwrap_or_default() {
            "ClusterRole" => add(typed::<ClusterRole>(file, &doc).rules, "ClusterRole"),
            "Role" => add(typed::<Role>(file, &doc).rules, "Role"),
            _ => {}
        }
    }
    out
}

/// The kinds `dovetail controller` watches, read from its source (every
/// `watch`, `watch_with` and `watch_in` call), with whether the watch is
/// in one namespace (`watch_in`).
fn watched_kinds() -> BTreeMap<String, bool> {
    let watch = regex::Regex::new(r"\.watch(_with|_in)?::<\s*([A-Za-z0-9_]+)\s*>").unwrap();
    let mut files = vec![root().join("src/cli/controller.rs")];
    collect_rs(&root().join("src/controller"), &mut files);
    let mut kinds = BTreeMap::new();
    for file in files {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // Unit tests' watches are not the controller's.
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        for c in watch.captures_iter(text) {
            let namespaced = c.get(1).is_some_and(|m| m.as_str() == "_in");
            let entry = kinds.entry(c[2].to_string()).or_insert(namespaced);
            *entry = *entry && namespaced;
        }
    }
    kinds
}

/// `(group, plural)` of a kind the controller watches, by its Rust name.
fn resource_of(kind: &str) -> (String, String) {
    use dovetail::world::Access;
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{
        ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate,
    };
    use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
    let a = match kind {
        "Pod" => Access::of::<Pod>("list", None),
        "SlimPod" => Access::of::<dovetail::api::SlimPod>("list", None),
        "Node" => Access::of::<Node>("list", None),
        "NodePool" => Access::of::<dovetail::api::NodePool>("list", None),
        "NodeClaim" => Access::of::<dovetail::api::NodeClaim>("list", None),
        "EC2NodeClass" => Access::of::<dovetail::api::EC2NodeClass>("list", None),
        "DaemonSet" => Access::of::<DaemonSet>("list", None),
        "PodDisruptionBudget" => Access::of::<PodDisruptionBudget>("list", None),
        "PersistentVolume" => Access::of::<PersistentVolume>("list", None),
        "PersistentVolumeClaim" => Access::of::<PersistentVolumeClaim>("list", None),
        "StorageClass" => Access::of::<StorageClass>("list", None),
        "VolumeAttachment" => Access::of::<VolumeAttachment>("list", None),
        "Lease" => Access::of::<Lease>("list", None),
        "ConfigMap" => Access::of::<ConfigMap>("list", None),
        "NodeOverlay" => Access::of::<dovetail::api::NodeOverlay>("list", None),
        "CapacityBuffer" => Access::of::<dovetail::api::CapacityBuffer>("list", None),
        "PodTemplate" => Access::of::<PodTemplate>("list", None),
        "Deployment" => Access::of::<Deployment>("list", None),
        "StatefulSet" => Access::of::<StatefulSet>("list", None),
        "ReplicaSet" => Access::of::<ReplicaSet>("list", None),
        other => panic!(
            "dovetail controller watches {other}: add it to this table, and grant list and watch on it in deploy/rbac.yaml"
        ),
    };
    (a.group, a.resource)
}

/// The writes the controller makes, as the in-memory API server logs them
/// (`cluster::seam`): simulated runs with provisioning, consolidation,
/// emptiness, drift, expiry, blocked and forced drains and config commits;
/// then the runtime's pieces a simulation does not run: leader election
/// (acquire, renew, release) and the Kubernetes Events of a pass.
fn written() -> BTreeSet<dovetail::world::Access> {
    use dovetail::simulate::{driver::Simulation, scenario};
    let mut accesses = BTreeSet::new();
    // Every scenario of the test suite (the files that load as scenarios:
    // the rest are their repositories and manifests, or bad on purpose).
    let mut files = Vec::new();
    collect_yaml(&root().join("tests/scenarios"), &mut files);
    files.sort();
    let mut ran = 0;
    for file in &files {
        let Ok(s) = scenario::load(file) else {
            continue;
        };
        let Ok(sim) = Simulation::new(s, None) else {
            continue;
        };
        let cluster = sim.cluster();
        if sim.run(None).is_ok() {
            ran += 1;
        }
        accesses.extend(cluster.accesses().into_keys());
    }
    assert!(ran >= 40, "only {ran} scenarios ran");
    accesses.extend(runtime_writes());
    accesses
}

fn collect_yaml(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_yaml(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml") {
            out.push(path);
        }
    }
}

/// Leader election and Events, against the in-memory server.
fn runtime_writes() -> BTreeSet<dovetail::world::Access> {
    use std::sync::Arc;
    use std::time::Duration;

    use dovetail::clock::{Clock, ManualClock, Timestamp};
    use dovetail::controller::Settings;
    use dovetail::controller::http::Health;
    use dovetail::controller::leader::{Elector, LeaseConfig};
    use dovetail::controller::metrics::Metrics;
    use dovetail::controller::runtime::{EventRecorder, Runtime};
    use dovetail::world::MemoryCluster;
    use dovetail::world::ec2::{SimConfig, SimEc2};

    let clock = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let cluster = Arc::new(MemoryCluster::new(dyn_clock.clone()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let config = LeaseConfig::new("dovetail", "dovetail-leader", "replica-a");
        let mut elector = Elector::new(cluster.clone(), dyn_clock.clone(), config);
        assert!(elector.try_acquire_or_renew().await.expect("acquired"));
        clock.advance(Duration::from_secs(2)).expect("advance");
        assert!(elector.try_acquire_or_renew().await.expect("renewed"));
        elector.release().await.expect("released");

        let read = |file: &str| -> Value {
            serde_saphyr::from_str(&std::fs::read_to_string(root().join(file)).expect(file))
                .expect(file)
        };
        cluster
            .create::<dovetail::api::EC2NodeClass>(
                serde_json::from_value(read("examples-repo/nodeclasses/default.yaml"))
                    .expect("a node class"),
            )
            .expect("created");
        cluster
            .create::<dovetail::api::NodePool>(
                serde_json::from_value(read("examples-repo/nodepools/general.yaml"))
                    .expect("a pool"),
            )
            .expect("created");
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "pending", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i",
                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
        }))
        .expect("a pod");
        cluster.create(pod).expect("created");
        let catalog = SimEc2::builtin_catalog().expect("catalog");
        let mut runtime = Runtime {
            cluster: cluster.clone(),
            cloud: Arc::new(SimEc2::new(SimConfig::new(catalog), dyn_clock.clone())),
            clock: dyn_clock.clone(),
            settings: Settings::default(),
            metrics: Metrics::new(),
            health: Arc::new(Health::default()),
            events: EventRecorder::new("replica-a"),
            sync: None,
            interruption: None,
            interruption_metrics: dovetail::interruption::Metrics::new(),
        };
        let controller = tokio::sync::Mutex::new(runtime.controller());
        for _ in 0..4 {
            runtime.pass(&controller).await;
            runtime.events.settled().await;
            clock.advance(Duration::from_secs(11)).expect("advance");
        }
    });
    let accesses: BTreeSet<_> = cluster.accesses().into_keys().collect();
    for (verb, resource) in [
        ("create", "leases"),
        ("update", "leases"),
        ("create", "events"),
    ] {
        assert!(
            accesses
                .iter()
                .any(|a| a.verb == verb && a.resource == resource),
            "the runtime made no {verb} on {resource}: {accesses:?}"
        );
    }
    accesses
}

/// deploy/rbac.yaml grants every request the controller makes and nothing
/// else: reads are `list` and `watch` of each watched kind (the caches
/// never `get`), writes are what the in-memory server logged. A write or
/// watch added to the code without its rule fails here, and so does a rule
/// nothing uses.
#[test]
fn rbac_grants_exactly_what_the_controller_reads_and_writes() {
    let granted = granted();
    // (grant, whether a Role in dovetail's namespace may grant it)
    let mut used: BTreeMap<Grant, bool> = BTreeMap::new();
    let watched = watched_kinds();
    assert!(
        watched.contains_key("SlimPod") && watched.contains_key("NodeClaim"),
        "the scan finds the controller's watches: {watched:?}"
    );
    let mut own_namespace = BTreeSet::new();
    for (kind, namespaced) in &watched {
        let (group, resource) = resource_of(kind);
        if *namespaced {
            own_namespace.insert((group.clone(), resource.clone()));
        }
        for verb in ["list", "watch"] {
            used.insert((verb.into(), group.clone(), resource.clone()), *namespaced);
        }
    }
    // The one GET outside the caches: the kube-dns Service, at start.
    let controller = std::fs::read_to_string(root().join("src/cli/controller.rs")).expect("source");
    assert!(
        controller.contains("kube_dns_ip("),
        "the controller reads the kube-dns Service"
    );
    used.insert(("get".into(), String::new(), "services".into()), false);
    for a in written() {
        // Writes to the kinds the controller watches in its own namespace
        // (the Lease, the sync status) stay there; every other write may
        // be to any namespace.
        let base = a.resource.split('/').next().unwrap_or_default().to_string();
        let local = own_namespace.contains(&(a.group.clone(), base));
        used.insert((a.verb, a.group, a.resource), local);
    }

    let name = |(verb, group, resource): &Grant| {
        if group.is_empty() {
            format!("{verb} {resource}")
        } else {
            format!("{verb} {resource}.{group}")
        }
    };
    let missing: Vec<String> = used
        .iter()
        .filter(|(g, local)| match granted.get(*g) {
            None => true,
            Some(&"Role") => !**local,
            Some(_) => false,
        })
        .map(|(g, local)| {
            let scope = if *local {
                ""
            } else {
                " (cluster-wide: the ClusterRole)"
            };
            format!("{}{scope}", name(g))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the controller makes requests deploy/rbac.yaml does not grant: {missing:#?}"
    );
    let unused: Vec<String> = granted
        .keys()
        .filter(|g| !used.contains_key(*g))
        .map(name)
        .collect();
    assert!(
        unused.is_empty(),
        "deploy/rbac.yaml grants what the controller never does: {unused:#?}"
    );
}
