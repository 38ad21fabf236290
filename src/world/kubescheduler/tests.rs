use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::clock::{Clock, ManualClock, parse_rfc3339};
use crate::scheduling::pod::is_provisionable;

fn start() -> Timestamp {
    parse_rfc3339("2026-01-05T00:00:00Z").expect("valid time")
}

fn cluster() -> (MemoryCluster, ManualClock) {
    let clock = ManualClock::new(start());
    (MemoryCluster::new(Arc::new(clock.clone())), clock)
}

/// A Ready node in `zone` with this allocatable cpu and memory.
fn node(name: &str, zone: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": zone,
        }},
        "spec": {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

fn with_taint(mut node: Value, key: &str, value: &str, effect: &str) -> Value {
    let taints = node["spec"]["taints"].take();
    let mut taints = taints.as_array().cloned().unwrap_or_default();
    taints.push(json!({"key": key, "value": value, "effect": effect}));
    node["spec"]["taints"] = Value::Array(taints);
    node
}

/// A pending pod labelled `app` with one container requesting cpu and
/// memory.
fn pod(name: &str, app: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
    })
}

fn add_nodes(cluster: &MemoryCluster, nodes: impl IntoIterator<Item = Value>) {
    for n in nodes {
        let n: Node = serde_json::from_value(n).expect("valid node");
        cluster.create(n).expect("node created");
    }
}

fn add_pods(cluster: &MemoryCluster, pods: impl IntoIterator<Item = Value>) {
    for p in pods {
        let p: Pod = serde_json::from_value(p).expect("valid pod");
        cluster.create(p).expect("pod created");
    }
}

/// Binds a pod directly, as if it had been scheduled earlier.
fn add_bound(cluster: &MemoryCluster, pod: Value, node: &str) {
    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    add_pods(cluster, [pod]);
    cluster.bind("default", &name, node).expect("bound");
}

fn bound_node(report: &ScheduleReport, pod: &str) -> Option<String> {
    let key = format!("default/{pod}");
    report
        .bound
        .iter()
        .find(|(p, _)| *p == key)
        .map(|(_, n)| n.clone())
}

fn anti_affinity(mut pod: Value, key: &str) -> Value {
    let app = pod["metadata"]["labels"]["app"].clone();
    pod["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    ]}});
    pod
}

#[test]
fn binds_where_the_resources_fit() {
    let (cluster, _) = cluster();
    add_nodes(
        &cluster,
        [node("a", "z1", "1", "4Gi"), node("b", "z1", "4", "4Gi")],
    );
    add_pods(
        &cluster,
        [pod("big", "x", "2", "1Gi"), pod("huge", "x", "8", "1Gi")],
    );
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(bound_node(&report, "big").as_deref(), Some("b"));
    assert_eq!(
        report.unschedulable,
        vec![(
            "default/huge".to_string(),
            "0/2 nodes are available: 2 Insufficient cpu.".to_string()
        )]
    );
    let bound: Arc<Pod> = cluster
        .get(&ObjectKey::new("default", "big"))
        .expect("exists");
    assert_eq!(
        bound.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("b")
    );
}

/// A pod being deleted gracefully keeps its resources on its node until
/// it is gone (kube-scheduler counts every pod bound to the node), and a
/// terminating pod is never scheduled.
#[test]
fn a_terminating_pod_holds_its_resources_until_it_is_gone_and_is_never_bound() {
    use crate::cluster::DeleteParams;
    let (cluster, _) = cluster();
    let scheduler = KubeScheduler::new();
    add_nodes(&cluster, [node("a", "z1", "2", "4Gi")]);
    add_bound(&cluster, pod("old", "x", "1500m", "1Gi"), "a");
    let mut held = pod("held", "x", "100m", "1Gi");
    held["metadata"]["finalizers"] = json!(["x/hold"]);
    add_pods(&cluster, [held]);
    cluster
        .delete::<Pod>(&ObjectKey::new("default", "held"))
        .expect("held by its finalizer");
    scheduler.schedule(&cluster, start());
    cluster
        .delete::<Pod>(&ObjectKey::new("default", "old"))
        .expect("terminating");
    add_pods(&cluster, [pod("new", "x", "1500m", "1Gi")]);
    let report = scheduler.schedule(&cluster, start());
    assert_eq!(bound_node(&report, "new"), None, "{report:?}");
    assert_eq!(bound_node(&report, "held"), None, "{report:?}");
    cluster
        .delete_with::<Pod>(
            &ObjectKey::new("default", "old"),
            &DeleteParams::with_grace_period(0),
        )
        .expect("gone");
    let report = scheduler.schedule(&cluster, start());
    assert_eq!(bound_node(&report, "new").as_deref(), Some("a"));
    assert_eq!(bound_node(&report, "held"), None);
}

#[test]
fn resources_of_bound_unfinished_pods_are_taken() {
    let (cluster, _) = cluster();
    add_nodes(&cluster, [node("a", "z1", "2", "4Gi")]);
    add_bound(&cluster, pod("running", "x", "1500m", "1Gi"), "a");
    let mut done = pod("done", "x", "1500m", "1Gi");
    done["status"] = json!({"phase": "Succeeded"});
    add_bound(&cluster, done, "a");
    add_pods(
        &cluster,
        [
            pod("fits", "x", "500m", "1Gi"),
            pod("late", "x", "100m", "1Gi"),
        ],
    );
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(bound_node(&report, "fits").as_deref(), Some("a"));
    assert_eq!(report.unschedulable.len(), 1, "{report:?}");
    assert_eq!(report.unschedulable[0].0, "default/late");
}

#[test]
fn a_tainted_gpu_node_gets_only_tolerating_pods() {
    let (cluster, _) = cluster();
    let gpu = with_taint(
        node("gpu", "z1", "8", "32Gi"),
        "nvidia.com/gpu",
        "true",
        "NoSchedule",
    );
    add_nodes(&cluster, [gpu, node("small", "z1", "1", "2Gi")]);
    let mut tolerant = pod("tolerant", "ml", "4", "8Gi");
    tolerant["spec"]["tolerations"] =
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
    add_pods(
        &cluster,
        [
            tolerant,
            pod("plain", "web", "500m", "1Gi"),
            pod("plain-big", "web", "4", "8Gi"),
        ],
    );
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(bound_node(&report, "tolerant").as_deref(), Some("gpu"));
    assert_eq!(bound_node(&report, "plain").as_deref(), Some("small"));
    assert_eq!(
        report.unschedulable,
        vec![(
            "default/plain-big".to_string(),
            "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 node(s) had untolerated taint {nvidia.com/gpu: true}.".to_string()
        )]
    );
}

#[test]
fn karpenter_taints_and_unready_nodes_repel_pods() {
    let (cluster, _) = cluster();
    let unregistered = with_taint(
        node("new", "z1", "4", "8Gi"),
        "karpenter.sh/unregistered",
        "",
        "NoExecute",
    );
    let disrupted = with_taint(
        node("old", "z1", "4", "8Gi"),
        "karpenter.sh/disrupted",
        "",
        "NoSchedule",
    );
    let mut unready = node("sick", "z1", "4", "8Gi");
    unready["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
    let mut cordoned = node("cordoned", "z1", "4", "8Gi");
    cordoned["spec"]["unschedulable"] = json!(true);
    add_nodes(&cluster, [unregistered, disrupted, unready, cordoned]);
    add_pods(&cluster, [pod("p", "web", "100m", "128Mi")]);
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(
        report.unschedulable[0].1,
        "0/4 nodes are available: 1 node(s) had untolerated taint {karpenter.sh/disrupted: }, \
         1 node(s) had untolerated taint {karpenter.sh/unregistered: }, \
         1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, \
         1 node(s) were unschedulable."
    );
}

#[test]
fn unschedulable_pods_get_the_condition_and_become_provisionable() {
    let (cluster, _) = cluster();
    add_pods(&cluster, [pod("p", "web", "1", "1Gi")]);
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(
        report.unschedulable[0].1,
        "no nodes available to schedule pods"
    );
    let p: Arc<Pod> = cluster
        .get(&ObjectKey::new("default", "p"))
        .expect("exists");
    assert!(is_provisionable(&crate::api::SlimPod::from(&*p)));
    let condition = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .cloned()
        .expect("condition written");
    assert_eq!(condition.status, "False");
    assert_eq!(condition.reason.as_deref(), Some("Unschedulable"));
}

#[test]
fn nothing_is_written_when_nothing_changes() {
    let (cluster, clock) = cluster();
    let scheduler = KubeScheduler::new();
    add_nodes(&cluster, [node("a", "z1", "1", "1Gi")]);
    let rv = cluster.resource_version();
    assert_eq!(
        scheduler.schedule(&cluster, start()),
        ScheduleReport::default()
    );
    assert_eq!(
        cluster.resource_version(),
        rv,
        "an empty pass writes nothing"
    );
    add_pods(&cluster, [pod("p", "web", "2", "1Gi")]);
    scheduler.schedule(&cluster, start());
    let rv = cluster.resource_version();
    let now = clock.advance(Duration::from_secs(60)).expect("in range");
    let again = scheduler.schedule(&cluster, now);
    assert_eq!(again.unschedulable.len(), 1, "still reported");
    assert_eq!(
        cluster.resource_version(),
        rv,
        "the same condition is not rewritten"
    );
    add_nodes(&cluster, [node("b", "z1", "1", "1Gi")]);
    scheduler.schedule(&cluster, now);
    assert!(
        cluster.resource_version() > rv + 1,
        "a new message is written"
    );
}

#[test]
fn required_node_affinity_and_node_selector_are_honoured() {
    let (cluster, _) = cluster();
    let mut arm = node("arm", "z1", "4", "8Gi");
    arm["metadata"]["labels"]["kubernetes.io/arch"] = json!("arm64");
    let mut amd = node("amd", "z1", "4", "8Gi");
    amd["metadata"]["labels"]["kubernetes.io/arch"] = json!("amd64");
    add_nodes(&cluster, [arm, amd]);
    let mut by_affinity = pod("by-affinity", "x", "1", "1Gi");
    by_affinity["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}]
    }}});
    let mut by_selector = pod("by-selector", "x", "1", "1Gi");
    by_selector["spec"]["nodeSelector"] = json!({"kubernetes.io/arch": "amd64"});
    let mut nowhere = pod("nowhere", "x", "1", "1Gi");
    nowhere["spec"]["nodeSelector"] = json!({"kubernetes.io/arch": "s390x"});
    add_pods(&cluster, [by_affinity, by_selector, nowhere]);
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(bound_node(&report, "by-affinity").as_deref(), Some("arm"));
    assert_eq!(bound_node(&report, "by-selector").as_deref(), Some("amd"));
    assert_eq!(
        report.unschedulable[0].1,
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    );
}

#[test]
fn hostname_anti_affinity_puts_one_replica_per_node() {
    let (cluster, _) = cluster();
    add_nodes(
        &cluster,
        [node("a", "z1", "8", "16Gi"), node("b", "z1", "8", "16Gi")],
    );
    add_pods(
        &cluster,
        (0..3).map(|i| {
            anti_affinity(
                pod(&format!("web-{i}"), "web", "100m", "128Mi"),
                "kubernetes.io/hostname",
            )
        }),
    );
    let report = KubeScheduler::new().schedule(&cluster, start());
    let nodes: HashSet<String> = report.bound.iter().map(|(_, n)| n.clone()).collect();
    assert_eq!(report.bound.len(), 2);
    assert_eq!(nodes.len(), 2, "one per node: {report:?}");
    assert_eq!(
        report.unschedulable,
        vec![(
            "default/web-2".to_string(),
            "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules.".to_string()
        )]
    );
}

#[test]
fn existing_pods_anti_affinity_repels_the_incoming_pod() {
    let (cluster, _) = cluster();
    add_nodes(
        &cluster,
        [node("a", "z1", "8", "16Gi"), node("b", "z2", "1", "2Gi")],
    );
    // The loner on `a` keeps `web` pods out of its zone.
    let mut loner = pod("loner", "loner", "100m", "128Mi");
    loner["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "topology.kubernetes.io/zone"}
    ]}});
    add_bound(&cluster, loner, "a");
    add_pods(
        &cluster,
        [
            pod("web", "web", "100m", "128Mi"),
            pod("other", "other", "2", "128Mi"),
        ],
    );
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(
        bound_node(&report, "web").as_deref(),
        Some("b"),
        "despite `a` being emptier"
    );
    assert_eq!(bound_node(&report, "other").as_deref(), Some("a"));
}

#[test]
fn required_pod_affinity_follows_the_target_and_lets_the_first_pod_in() {
    let (cluster, _) = cluster();
    add_nodes(
        &cluster,
        [node("a", "z1", "8", "16Gi"), node("b", "z2", "8", "16Gi")],
    );
    add_bound(&cluster, pod("cache", "cache", "4", "8Gi"), "a");
    let follow = |name: &str, app: &str, target: &str| {
        let mut p = pod(name, app, "100m", "128Mi");
        p["spec"]["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": target}}, "topologyKey": "topology.kubernetes.io/zone"}
        ]}});
        p
    };
    // `self` pods have affinity to their own kind: the first one may go anywhere.
    add_pods(
        &cluster,
        [
            follow("app", "app", "cache"),
            follow("self", "self", "self"),
            follow("lost", "lost", "nothing"),
        ],
    );
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(
        bound_node(&report, "app").as_deref(),
        Some("a"),
        "b is emptier, but has no cache"
    );
    assert!(bound_node(&report, "self").is_some());
    assert_eq!(
        report.unschedulable[0].1,
        "0/2 nodes are available: 2 node(s) didn't match pod affinity rules."
    );
}

fn spread(mut pod: Value, key: &str, when: &str) -> Value {
    let app = pod["metadata"]["labels"]["app"].clone();
    pod["spec"]["topologySpreadConstraints"] = json!([{
        "maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"app": app}},
    }]);
    pod
}

#[test]
fn zone_spread_do_not_schedule_balances_three_zones() {
    let (cluster, _) = cluster();
    // Zone z1 has far more room, so resource scores alone would pack it.
    add_nodes(
        &cluster,
        [
            node("a1", "z1", "64", "256Gi"),
            node("a2", "z1", "64", "256Gi"),
            node("b1", "z2", "2", "4Gi"),
            node("c1", "z3", "2", "4Gi"),
        ],
    );
    add_pods(
        &cluster,
        (0..7).map(|i| {
            spread(
                pod(&format!("web-{i}"), "web", "500m", "512Mi"),
                "topology.kubernetes.io/zone",
                "DoNotSchedule",
            )
        }),
    );
    let report = KubeScheduler::new().schedule(&cluster, start());
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, node) in &report.bound {
        let zone = match node.as_bytes()[0] {
            b'a' => "z1",
            b'b' => "z2",
            _ => "z3",
        };
        *per_zone.entry(zone).or_default() += 1;
    }
    assert_eq!(report.bound.len(), 7, "{report:?}");
    let counts: Vec<usize> = per_zone.values().copied().collect();
    assert!(
        counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0) <= 1,
        "{per_zone:?}"
    );
    // z2 and z3 fit 4 pods each (2 cpu / 500m): with them full, z1 may
    // run only one pod more, so of 14 pods one is left: the last in
    // queue order (same creation second, so by name).
    add_pods(
        &cluster,
        (7..14).map(|i| {
            spread(
                pod(&format!("web-{i}"), "web", "500m", "512Mi"),
                "topology.kubernetes.io/zone",
                "DoNotSchedule",
            )
        }),
    );
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(report.bound.len(), 6, "{report:?}");
    assert_eq!(
        report.unschedulable,
        vec![(
            "default/web-9".to_string(),
            "0/4 nodes are available: 2 Insufficient cpu, 2 node(s) didn't match pod topology spread constraints.".to_string()
        )]
    );
}

#[test]
fn schedule_anyway_spread_prefers_the_emptier_zone() {
    let (cluster, _) = cluster();
    add_nodes(
        &cluster,
        [node("a", "z1", "8", "16Gi"), node("b", "z2", "8", "16Gi")],
    );
    add_bound(&cluster, pod("web-0", "web", "100m", "128Mi"), "a");
    add_bound(&cluster, pod("web-1", "web", "100m", "128Mi"), "a");
    // A heavy pod on b makes LeastAllocated prefer a.
    add_bound(&cluster, pod("heavy", "heavy", "2", "4Gi"), "b");
    add_pods(
        &cluster,
        [spread(
            pod("web-2", "web", "100m", "128Mi"),
            "topology.kubernetes.io/zone",
            "ScheduleAnyway",
        )],
    );
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(bound_node(&report, "web-2").as_deref(), Some("b"));
}

/// Hand-computed: the incoming pod asks for 2 cpu and 256Mi.
/// - `a` (empty, 4 cpu / 8Gi): LeastAllocated (50 + 96) / 2 = 73;
///   BalancedAllocation fractions 0.5 and 0.03125, 1 - 0.234 → 76;
///   total 149.
/// - `b` (a pod with cpu 0 and 3840Mi): LeastAllocated (50 + 50) / 2 =
///   50; BalancedAllocation 0.5 and 0.5 → 100; total 150.
///
/// The other plugins score both nodes alike, so balance wins over
/// spreading by one point.
#[test]
fn balanced_allocation_can_outweigh_least_allocated() {
    let (cluster, _) = cluster();
    add_nodes(
        &cluster,
        [node("a", "z1", "4", "8Gi"), node("b", "z1", "4", "8Gi")],
    );
    add_bound(&cluster, pod("memory-hog", "hog", "0", "3840Mi"), "b");
    add_pods(&cluster, [pod("p", "web", "2", "256Mi")]);
    let state_report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(bound_node(&state_report, "p").as_deref(), Some("b"));
}

/// With an extra 256Mi on `b` the balance is lost (fractions 0.5 and
/// 0.53125 → 98, LeastAllocated (50 + 46) / 2 = 48, total 146), and the
/// least allocated node `a` wins with 149.
#[test]
fn least_allocated_spreads_when_balance_is_even() {
    let (cluster, _) = cluster();
    add_nodes(
        &cluster,
        [node("a", "z1", "4", "8Gi"), node("b", "z1", "4", "8Gi")],
    );
    add_bound(&cluster, pod("memory-hog", "hog", "0", "4Gi"), "b");
    add_pods(&cluster, [pod("p", "web", "2", "256Mi")]);
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(bound_node(&report, "p").as_deref(), Some("a"));
}

#[test]
fn queue_order_is_priority_then_age() {
    let (cluster, clock) = cluster();
    add_nodes(&cluster, [node("a", "z1", "1", "4Gi")]);
    add_pods(&cluster, [pod("old", "x", "1", "1Gi")]);
    clock.advance(Duration::from_secs(1)).expect("in range");
    let mut urgent = pod("urgent", "x", "1", "1Gi");
    urgent["spec"]["priority"] = json!(1000);
    add_pods(&cluster, [urgent]);
    let report = KubeScheduler::new().schedule(&cluster, clock.now());
    assert_eq!(bound_node(&report, "urgent").as_deref(), Some("a"));
    assert_eq!(report.unschedulable[0].0, "default/old");
}

#[test]
fn host_ports_conflict() {
    let (cluster, _) = cluster();
    add_nodes(&cluster, [node("a", "z1", "8", "16Gi")]);
    let with_port = |name: &str| {
        let mut p = pod(name, "x", "100m", "128Mi");
        p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 8080}]);
        p
    };
    add_pods(&cluster, [with_port("first"), with_port("second")]);
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert_eq!(report.bound.len(), 1);
    assert_eq!(
        report.unschedulable[0].1,
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    );
}

#[test]
fn scheduling_gates_hold_pods_back() {
    let (cluster, _) = cluster();
    add_nodes(&cluster, [node("a", "z1", "8", "16Gi")]);
    let mut gated = pod("gated", "x", "100m", "128Mi");
    gated["spec"]["schedulingGates"] = json!([{"name": "example.com/wait"}]);
    add_pods(&cluster, [gated]);
    let report = KubeScheduler::new().schedule(&cluster, start());
    assert!(report.bound.is_empty() && report.unschedulable.is_empty());
    let p: Arc<Pod> = cluster
        .get(&ObjectKey::new("default", "gated"))
        .expect("exists");
    assert!(
        !is_provisionable(&crate::api::SlimPod::from(&*p)),
        "gated pods are not provisionable"
    );
}

fn mixed_cluster() -> MemoryCluster {
    let (cluster, _) = cluster();
    add_nodes(
        &cluster,
        (0..12).map(|i| node(&format!("n{i:02}"), ["z1", "z2", "z3"][i % 3], "4", "16Gi")),
    );
    add_pods(
        &cluster,
        (0..60).map(|i| {
            let p = pod(
                &format!("p{i:02}"),
                ["web", "api", "db"][i % 3],
                "300m",
                "1Gi",
            );
            match i % 3 {
                0 => spread(p, "topology.kubernetes.io/zone", "DoNotSchedule"),
                1 => spread(p, "kubernetes.io/hostname", "ScheduleAnyway"),
                _ => p,
            }
        }),
    );
    cluster
}

#[test]
fn the_same_cluster_gives_the_same_bindings() {
    let first = KubeScheduler::new().schedule(&mixed_cluster(), start());
    let second = KubeScheduler::new().schedule(&mixed_cluster(), start());
    assert_eq!(first.bound.len(), 60);
    assert_eq!(first, second);
}

type Summary = (
    BTreeMap<String, (Vec<i64>, i64, Vec<i32>, Vec<u32>, String)>,
    Vec<(String, usize)>,
    Vec<String>,
    Vec<String>,
    Vec<(String, usize)>,
);

/// What an index knows, by node name: requests, pod count, host ports
/// and the count of pods labelled `app=web`; bound pods; pending and
/// waiting pods; the nodes' places by name.
fn summary(index: &mut Index) -> Summary {
    let web = index.state.counter(CounterKey {
        terms: vec![(
            Namespaces::All,
            LabelSelector {
                match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
                ..LabelSelector::default()
            },
        )],
        skip_terminating: false,
    });
    let state = &index.state;
    let nodes = state
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut requested = n.requested.to_vec();
            requested.extend(n.non_zero);
            let mut ports: Vec<i32> = n.ports.iter().map(|p| p.port).collect();
            ports.sort();
            let anti: u32 = state.existing_anti.groups.iter().map(|g| g.2[i]).sum();
            let web = state.counters[web].per_node[i];
            // The node as parsed: kept for an unchanged node, read
            // again for a changed one.
            let taints: Vec<&Taint> = n
                .taints
                .iter()
                .map(|&t| &state.taints[t as usize])
                .collect();
            let parsed = format!(
                "{:?}",
                (
                    &n.labels,
                    taints,
                    n.unschedulable,
                    n.alloc,
                    n.alloc_pods,
                    &n.alloc_extended
                )
            );
            (
                n.name.clone(),
                (requested, n.pod_count, ports, vec![anti, web], parsed),
            )
        })
        .collect();
    let mut bound: Vec<(String, usize)> = state
        .bound
        .iter()
        .map(|(k, b)| (k.to_string(), b.node))
        .collect();
    bound.sort();
    let sorted = |set: &HashSet<ObjectKey, Hasher>| {
        let mut v: Vec<String> = set.iter().map(ToString::to_string).collect();
        v.sort();
        v
    };
    let mut places: Vec<(String, usize)> = state
        .node_index
        .iter()
        .map(|(name, &at)| (name.clone(), at))
        .collect();
    places.sort();
    (
        nodes,
        bound,
        sorted(&index.pending),
        sorted(&index.waiting),
        places,
    )
}

#[test]
fn the_index_kept_across_calls_matches_a_fresh_one() {
    for capacity in [4096, 1] {
        let (cluster, _) = cluster();
        let cluster = cluster.with_watch_log_capacity(capacity);
        let scheduler = KubeScheduler::new();
        add_nodes(
            &cluster,
            [node("a", "z1", "2", "4Gi"), node("b", "z2", "2", "4Gi")],
        );
        let mut pods: Vec<Value> = (0..4)
            .map(|i| {
                spread(
                    pod(&format!("web-{i}"), "web", "500m", "512Mi"),
                    "topology.kubernetes.io/zone",
                    "DoNotSchedule",
                )
            })
            .collect();
        pods.push(anti_affinity(
            pod("loner", "loner", "100m", "128Mi"),
            "kubernetes.io/hostname",
        ));
        let mut ported = pod("ported", "x", "100m", "128Mi");
        ported["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 8080}]);
        pods.push(ported);
        add_pods(&cluster, pods);
        let first = scheduler.schedule(&cluster, start());
        assert_eq!(first.bound.len(), 6, "{first:?}");
        // Changes the index must follow.
        cluster
            .delete::<Pod>(&ObjectKey::new("default", "web-0"))
            .expect("deleted");
        let b_pods: Vec<String> = first
            .bound
            .iter()
            .filter(|(_, n)| n == "b")
            .map(|(p, _)| p.clone())
            .collect();
        assert!(!b_pods.is_empty());
        cluster
            .delete::<Node>(&ObjectKey::cluster("b"))
            .expect("deleted");
        add_nodes(&cluster, [node("c", "z3", "2", "4Gi")]);
        let mut early = pod("early", "web", "200m", "256Mi");
        early["spec"]["nodeName"] = json!("later");
        add_pods(&cluster, [early, pod("new", "web", "100m", "128Mi")]);
        cluster
            .update_with::<Node>(&ObjectKey::cluster("a"), |n| {
                n.metadata
                    .labels
                    .get_or_insert_default()
                    .insert("topology.kubernetes.io/zone".into(), "z9".into());
            })
            .expect("relabelled");
        cluster
            .update_with::<Node>(&ObjectKey::cluster("c"), |n| {
                n.spec.get_or_insert_default().taints =
                    Some(vec![k8s_openapi::api::core::v1::Taint {
                        key: "dedicated".into(),
                        value: Some("batch".into()),
                        effect: "PreferNoSchedule".into(),
                        ..k8s_openapi::api::core::v1::Taint::default()
                    }]);
            })
            .expect("tainted");
        let second = scheduler.schedule(&cluster, start());
        assert_eq!(second.bound.len(), 1, "{second:?}");
        let mut guard = scheduler
            .index
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let kept = guard.as_mut().expect("index kept");
        let mut fresh = Index::load(&cluster, None);
        assert_eq!(summary(kept), summary(&mut fresh), "capacity {capacity}");
        assert_eq!(
            kept.waiting.len(),
            1 + b_pods.len(),
            "pods of missing nodes wait"
        );
        drop(guard);
        // The missing node arrives.
        add_nodes(&cluster, [node("later", "z1", "2", "4Gi")]);
        scheduler.schedule(&cluster, start());
        let mut guard = scheduler
            .index
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let kept = guard.as_mut().expect("index kept");
        let mut fresh = Index::load(&cluster, None);
        assert_eq!(summary(kept), summary(&mut fresh), "capacity {capacity}");
    }
}

#[test]
fn nodes_changed_in_place_are_read_again() {
    let (cluster, _) = cluster();
    let scheduler = KubeScheduler::new();
    add_nodes(
        &cluster,
        [node("a", "z1", "2", "4Gi"), node("b", "z2", "2", "4Gi")],
    );
    add_pods(&cluster, [pod("web-0", "web", "500m", "512Mi")]);
    let first = scheduler.schedule(&cluster, start());
    let went = bound_node(&first, "web-0").expect("bound");
    let empty = if went == "a" { "b" } else { "a" };
    // Only changes to the nodes it has: the empty node gets a taint the
    // pods do not tolerate, the other a new zone and more memory.
    cluster
        .update_with::<Node>(&ObjectKey::cluster(empty), |n| {
            n.spec.get_or_insert_default().taints = Some(vec![k8s_openapi::api::core::v1::Taint {
                key: "dedicated".into(),
                value: Some("batch".into()),
                effect: "NoSchedule".into(),
                ..k8s_openapi::api::core::v1::Taint::default()
            }]);
        })
        .expect("tainted");
    cluster
        .update_with::<Node>(&ObjectKey::cluster(&went), |n| {
            n.metadata
                .labels
                .get_or_insert_default()
                .insert("topology.kubernetes.io/zone".into(), "z9".into());
            let alloc = n
                .status
                .get_or_insert_default()
                .allocatable
                .get_or_insert_default();
            alloc.insert(
                "memory".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("8Gi".into()),
            );
        })
        .expect("relabelled");
    add_pods(&cluster, [pod("web-1", "web", "500m", "512Mi")]);
    let second = scheduler.schedule(&cluster, start());
    // The same constraints as web-0's: a verdict cached from before the
    // taint would send it to the emptier node.
    assert_eq!(
        bound_node(&second, "web-1"),
        Some(went.clone()),
        "{second:?}"
    );
    let mut guard = scheduler
        .index
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let kept = guard.as_mut().expect("index kept");
    assert_eq!(kept.state.nodes.len(), 2);
    let mut fresh = Index::load(&cluster, None);
    assert_eq!(summary(kept), summary(&mut fresh));
}

/// Speed on the simulation's largest state: 2,000 nodes and 40,000
/// pods of 50 workloads (a third with zone spread, a third with
/// hostname spread). Run with
/// `cargo test --release --lib kubescheduler -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark; run in release"]
fn bench_2000_nodes_40000_pods() {
    use std::time::Instant;
    let (cluster, _) = cluster();
    add_nodes(
        &cluster,
        (0..2000).map(|i| node(&format!("n{i:04}"), ["z1", "z2", "z3"][i % 3], "16", "64Gi")),
    );
    let workload = |i: usize| {
        let app = format!("app-{}", i % 50);
        let p = pod(&format!("p{i:05}"), &app, "500m", "1Gi");
        match (i % 50) % 3 {
            0 => spread(p, "topology.kubernetes.io/zone", "DoNotSchedule"),
            1 => spread(p, "kubernetes.io/hostname", "ScheduleAnyway"),
            _ => p,
        }
    };
    let scheduler = KubeScheduler::new();
    let mut total_bound = 0;
    let t = Instant::now();
    // Arrivals in 40 waves of 1,000, each followed by a pass.
    for wave in 0..40 {
        add_pods(&cluster, (wave * 1000..(wave + 1) * 1000).map(workload));
        let t = Instant::now();
        let report = scheduler.schedule(&cluster, start());
        total_bound += report.bound.len();
        if wave % 10 == 9 {
            eprintln!(
                "wave {wave}: {} bound in {:?}",
                report.bound.len(),
                t.elapsed()
            );
        }
    }
    eprintln!("40 waves: {total_bound} bound in {:?}", t.elapsed());
    assert_eq!(total_bound, 40_000);
    let t = Instant::now();
    for _ in 0..100 {
        assert!(scheduler.schedule(&cluster, start()).bound.is_empty());
    }
    eprintln!("empty pass: {:?}", t.elapsed() / 100);
    add_pods(
        &cluster,
        (0..200).map(|i| pod(&format!("big{i:03}"), "big", "64", "1Gi")),
    );
    let t = Instant::now();
    let report = scheduler.schedule(&cluster, start());
    eprintln!("200 unschedulable on the full state: {:?}", t.elapsed());
    assert_eq!(report.unschedulable.len(), 200);
    let t = Instant::now();
    scheduler.schedule(&cluster, start());
    eprintln!("again, nothing to write: {:?}", t.elapsed());
}
