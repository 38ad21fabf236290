//! The simulation loop: the scenario's timeline, the stand-in workload
//! controllers, kube-scheduler and kubelet, and dovetail's controller, all
//! on one virtual clock. Time jumps to the next thing that can happen: a
//! timeline step, the controller's next wake-up, an instance becoming
//! ready, or at most [`MAX_STEP`] while work is running.
//!
//! The controller's launches are sent within its pass, on the virtual clock
//! (`ManualClock::run`). The loop also wakes when a terminating pod's grace
//! period ends, for the kubelet to remove it. The `interrupt` step hands the
//! simulated EC2's event bodies to `interruption::deliver` and the
//! controller's handler, as the SQS poller does. With `--metrics`, the
//! controller's `/metrics` families (`controller::runtime::gather`) are
//! gathered at the end and, with `--metrics-every`, between passes at each
//! snapshot's time.
//!
//! `simulate --serve` runs this loop on a clock that follows the wall clock
//! (`ManualClock::follow_wall`) while `serve` serves its `MemoryCluster` over
//! HTTP: either the in-process controller runs it, as in every simulation, or
//! (`--controller none`) an external `dovetail controller` does through a
//! real `kube::Client`, while the stand-in kubelet registers Nodes for the
//! instances an EC2 endpoint (moto) lists for the cluster (`ExternalEc2`).
//! `tests/serve.rs` tests the production path that way, end to end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::Value;

use super::commit::ConfigRepo;
use super::report::{Progress, Recorder, Report};
use super::scenario::{
    Action, InterruptStep, InterruptTarget, Manifest, NodeConditionStep, Scenario,
};
use crate::api::{ApiKind, CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use crate::clock::{Clock, ManualClock, Timestamp};
use crate::cluster::{Object, ObjectKey, Selector};
use crate::config::load;
use crate::config::source::Revision;
use crate::config::validate;
use crate::config::yaml::Limits;
use crate::controller::{Controller, Settings};
use crate::diag::{Diagnostic, Severity};
use crate::model::InstanceType;
use crate::world::MemoryCluster;
use crate::world::ec2::SimEc2;
use crate::world::kubelet::Kubelet;
use crate::world::kubescheduler::KubeScheduler;
use crate::world::volumes::AttachDetach;
use crate::world::workloads::Workloads;

/// The longest jump of the virtual clock while Job pods run, so their
/// completions are noticed promptly.
pub const MAX_STEP: Duration = Duration::from_secs(30);
/// The controller's periodic resync in the simulation. Every change in the
/// simulated cluster is followed by a reconcile, and timed work (registration
/// timeouts, batch windows) reports its own wake-up, so the safety resync a
/// real cluster needs against missed watch events can be long here.
pub const SIM_RESYNC: Duration = Duration::from_secs(15 * 60);
/// How often the fleet's price is sampled against the workload's lower
/// bound for the report's `fleet[]` series.
pub const FLEET_SAMPLE: Duration = Duration::from_secs(15 * 60);
/// The step after anything changed, to let the loops settle.
pub const SETTLE_STEP: Duration = Duration::from_secs(1);
/// Watch history kept by the simulated API server: enough for a burst of
/// tens of thousands of pods between two report updates. A run that is not
/// served compacts it at every tick to what its watchers have not read.
const WATCH_LOG: usize = 1 << 20;

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{}", .0.first().map(ToString::to_string).unwrap_or_default())]
    Input(Vec<Diagnostic>),
    #[error("the configuration repository {path} is invalid")]
    InvalidConfig {
        path: String,
        diagnostics: Vec<Diagnostic>,
    },
    #[error("{0}")]
    Setup(String),
}

fn input_error(m: &Manifest, message: impl Into<String>) -> SimError {
    SimError::Input(vec![
        Diagnostic::error("scenario", message)
            .in_file(m.file.clone())
            .at(m.pos),
    ])
}

fn kind_name(v: &Value) -> String {
    crate::diag::kind_name(v)
}

/// Creates an object, or replaces the existing one of the same name. With
/// `restore` (the initial state) a new object is loaded as a snapshot has
/// it: its uid (which its dependents' owner references name), creation
/// time and status are kept ([`MemoryCluster::restore`]).
fn upsert<K: Object>(cluster: &MemoryCluster, m: &Manifest, restore: bool) -> Result<(), SimError> {
    let obj: K = K::deserialize(&m.object)
        .map_err(|e| input_error(m, format!("{}: {e}", kind_name(&m.object))))?;
    let key = ObjectKey::of(&obj);
    let res = match cluster.get_opt::<K>(&key) {
        Some(existing) => {
            let mut obj = obj;
            obj.meta_mut().resource_version = existing.meta().resource_version.clone();
            cluster.replace(obj).map(|_| ())
        }
        None if restore => cluster.restore(obj).map(|_| ()),
        None => cluster.create(obj).map(|_| ()),
    };
    res.map_err(|e| input_error(m, format!("{}: {e}", kind_name(&m.object))))
}

fn apply(cluster: &MemoryCluster, m: &Manifest) -> Result<(), SimError> {
    apply_as(cluster, m, false)
}

/// [`apply`], restoring new objects as a snapshot has them with `restore`.
fn apply_as(cluster: &MemoryCluster, m: &Manifest, restore: bool) -> Result<(), SimError> {
    match m.kind() {
        "Pod" => upsert::<Pod>(cluster, m, restore),
        "Deployment" => upsert::<Deployment>(cluster, m, restore),
        "ReplicaSet" => upsert::<ReplicaSet>(cluster, m, restore),
        "StatefulSet" => upsert::<StatefulSet>(cluster, m, restore),
        "Job" => upsert::<Job>(cluster, m, restore),
        "DaemonSet" => upsert::<DaemonSet>(cluster, m, restore),
        "PodDisruptionBudget" => upsert::<PodDisruptionBudget>(cluster, m, restore),
        "PersistentVolume" => upsert::<PersistentVolume>(cluster, m, restore),
        "PersistentVolumeClaim" => upsert::<PersistentVolumeClaim>(cluster, m, restore),
        "StorageClass" => upsert::<StorageClass>(cluster, m, restore),
        "Node" => upsert::<Node>(cluster, m, restore),
        "NodeClaim" => upsert::<NodeClaim>(cluster, m, restore),
        "NodePool" => upsert::<NodePool>(cluster, m, restore),
        "EC2NodeClass" => upsert::<EC2NodeClass>(cluster, m, restore),
        "NodeOverlay" => upsert::<NodeOverlay>(cluster, m, restore),
        "CapacityBuffer" => upsert::<CapacityBuffer>(cluster, m, restore),
        "PodTemplate" => upsert::<PodTemplate>(cluster, m, restore),
        other => Err(input_error(
            m,
            format!(
                "cannot apply kind {other:?}: the simulation supports Pod, PodTemplate, Deployment, ReplicaSet, StatefulSet, Job, DaemonSet, PodDisruptionBudget, PersistentVolume, PersistentVolumeClaim, StorageClass, Node, NodeClaim, NodePool, EC2NodeClass, NodeOverlay and CapacityBuffer"
            ),
        )),
    }
}

fn delete_matching<K: Object>(
    cluster: &MemoryCluster,
    namespace: Option<&str>,
    name: Option<&str>,
    selector: &Selector,
) -> usize {
    let items = cluster.list::<K>(namespace, selector).items;
    let mut n = 0;
    for o in items {
        if name.is_some_and(|want| o.meta().name.as_deref() != Some(want)) {
            continue;
        }
        if cluster.delete::<K>(&ObjectKey::of(o.as_ref())).is_ok() {
            n += 1;
        }
    }
    n
}

/// Everything a running simulation holds.
pub struct Simulation {
    scenario: Scenario,
    clock: Arc<ManualClock>,
    cluster: Arc<MemoryCluster>,
    cloud: Arc<SimEc2>,
    /// In a lock, as [`crate::controller::pass`] takes it; nothing else
    /// holds it, so the simulation reaches in with `get_mut`.
    controller: tokio::sync::Mutex<Controller<MemoryCluster, SimEc2>>,
    kubelet: Kubelet,
    volumes: AttachDetach,
    scheduler: KubeScheduler,
    workloads: Workloads,
    catalog: Vec<InstanceType>,
    recorder: Recorder,
    runtime: tokio::runtime::Runtime,
    /// Passes of the loop, and those in which something changed.
    ticks: u64,
    changed_ticks: u64,
    /// The git copy of the configuration, from the first `commit` step on.
    config_repo: Option<ConfigRepo>,
    /// When the fleet was last sampled, and the lower bound then with the
    /// pods' revision it was computed for.
    last_sample: Option<Timestamp>,
    bound: Option<(u64, Option<f64>)>,
    /// The Pod revision and a hash of the pods that need capacity then.
    workload_pods: Option<(u64, u64)>,
    /// Wall-clock time from the receipt of each interruption message to
    /// its handling done (its NodeClaims marked for deletion).
    interruption_handling: Vec<std::time::Duration>,
    /// The metrics to keep for the report ([`Simulation::with_metrics`]).
    metrics: Option<MetricsPlan>,
    /// Whether dovetail's controller runs in this process; `false` when an
    /// external `dovetail controller` runs the served cluster.
    in_process: bool,
    /// The EC2 the instances come from when it is not the simulated one
    /// (`simulate --serve --ec2-endpoint`), with its last listing.
    external: Option<External>,
    /// The cluster's resource version at the end of the last tick, through
    /// which the next tick compacts the watch logs; `None` when they keep
    /// their whole capacity (`simulate --serve`: clients watch them).
    compact_through: Option<u64>,
}

/// An EC2 API the simulation only reads: its instances tagged for the
/// cluster get Nodes, labelled from the simulation's catalog.
struct External {
    ec2: ExternalEc2,
    instances: Vec<Arc<crate::cloud::Instance>>,
    listed: Option<std::time::Instant>,
}

/// Where `simulate --serve --ec2-endpoint` reads instances.
#[derive(Debug, Clone)]
pub struct ExternalEc2 {
    pub client: aws_sdk_ec2::Client,
    pub region: String,
    /// Instances tagged `kubernetes.io/cluster/<cluster>: owned` are the
    /// cluster's.
    pub cluster: String,
}

impl ExternalEc2 {
    /// The cluster's instances that are not terminated, as the kubelet
    /// stand-in needs them.
    async fn list(&self, catalog: &[InstanceType]) -> Result<Vec<crate::cloud::Instance>, String> {
        use aws_sdk_ec2::types::Filter;
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .client
                .describe_instances()
                .filters(
                    Filter::builder()
                        .name(format!("tag:kubernetes.io/cluster/{}", self.cluster))
                        .values("owned")
                        .build(),
                )
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| {
                    format!(
                        "ec2:DescribeInstances: {}",
                        aws_sdk_ec2::error::DisplayErrorContext(&e)
                    )
                })?;
            for i in page.reservations().iter().flat_map(|r| r.instances()) {
                let labels = |name: &str| {
                    catalog
                        .iter()
                        .find(|t| t.name == name)
                        .map(|t| {
                            t.requirements
                                .labels()
                                .into_iter()
                                .filter(|(k, _)| crate::model::labels::is_well_known(k))
                                .collect()
                        })
                        .unwrap_or_default()
                };
                if let Some(instance) =
                    crate::cloud::aws::instances::convert(i, &self.region, labels, |_, _, _| None)
                    && instance.state != crate::cloud::InstanceState::Terminated
                {
                    out.push(instance);
                }
            }
            token = page.next_token().map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

/// How `simulate --serve` runs the simulation.
pub struct Served {
    /// Multiple of real time (only with the in-process controller).
    pub speed: f64,
    /// Run dovetail's controller in this process.
    pub in_process: bool,
    /// The EC2 to read instances from instead of the simulated one.
    pub ec2: Option<ExternalEc2>,
    /// Set to stop the run (Ctrl-C, SIGTERM).
    pub stop: Arc<std::sync::atomic::AtomicBool>,
}

/// How long a node's kubelet may be silent before it is NotReady, and
/// then removed when its instance is gone (`--node-monitor-grace-period`).
const NODE_MONITOR_GRACE: std::time::Duration = std::time::Duration::from_secs(40);

/// How often an external EC2 is listed.
const EXTERNAL_LIST_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// The longest real-time pause of a served run between passes, so that
/// writes through the served API are acted on promptly.
const SERVED_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Which metrics a run keeps: the last gather, and with `every` a snapshot
/// at the start and every `every` of simulated time.
#[derive(Debug)]
struct MetricsPlan {
    /// Added to every sample, as a scrape adds its target's labels.
    labels: Vec<(String, String)>,
    every: Option<Duration>,
    next: Option<Timestamp>,
    series: crate::metrics::exposition::Series,
    last: Option<Timestamp>,
}

/// The initial state's nodes run on instances the simulated EC2 did not
/// launch: it learns them (type, zone, capacity type and NodePool from the
/// node's labels, the NodeClaim whose providerID names it, its image from
/// that NodeClaim), as if they had been running since before the start.
fn adopt_initial_nodes(
    cluster: &MemoryCluster,
    cloud: &SimEc2,
    start: Timestamp,
) -> Result<(), SimError> {
    use crate::api::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE};
    let claims = cluster
        .list::<NodeClaim>(None, &Selector::everything())
        .items;
    for node in cluster.list::<Node>(None, &Selector::everything()).items {
        let Some(pid) = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .filter(|p| !p.is_empty())
        else {
            continue;
        };
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        let claim = claims.iter().find(|c| {
            c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid.as_str())
        });
        let name = node.metadata.name.clone().unwrap_or_default();
        let instance = crate::cloud::Instance {
            id: String::new(),
            provider_id: pid.clone(),
            instance_type: label(LABEL_INSTANCE_TYPE),
            zone: label(LABEL_ZONE),
            capacity_type: labels
                .get(LABEL_CAPACITY_TYPE)
                .cloned()
                .unwrap_or_else(|| crate::api::CAPACITY_TYPE_ON_DEMAND.to_string()),
            price: 0.0,
            launched_at: node
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(start, |t| t.0.min(start)),
            state: crate::cloud::InstanceState::Running,
            nodeclaim: claim
                .and_then(|c| c.metadata.name.clone())
                .unwrap_or_default(),
            nodepool: label(LABEL_NODEPOOL),
            labels: labels.clone().into(),
            image_id: claim.and_then(|c| c.status.as_ref()?.image_id.clone()),
            subnet_id: None,
            security_group_ids: Vec::new(),
            launch_batch: Vec::new(),
            efa_attached: false,
        };
        cloud
            .adopt(instance)
            .map_err(|e| SimError::Setup(format!("initial Node/{name}: {e}")))?;
    }
    Ok(())
}

/// The configuration repository at `path` (the files on disk), validated
/// as `dovetail validate` does: its EC2NodeClasses, then its NodePools.
pub fn load_config(path: &std::path::Path) -> Result<Vec<Manifest>, SimError> {
    let loaded = load::load(path, &Revision::Worktree, false, &Limits::default())
        .map_err(|e| SimError::Setup(format!("{}: {e}", path.display())))?;
    let report = validate::validate(&loaded, &validate::Options::default());
    config_manifests(report, &path.display().to_string())
}

/// The objects of a validated configuration to apply, EC2NodeClasses
/// first; an error with the diagnostics when it does not validate.
pub fn config_manifests(report: validate::Report, path: &str) -> Result<Vec<Manifest>, SimError> {
    if report.count(Severity::Error) > 0 {
        return Err(SimError::InvalidConfig {
            path: path.to_string(),
            diagnostics: report
                .diagnostics
                .into_iter()
                .filter(|d| d.severity == Severity::Error)
                .collect(),
        });
    }
    Ok(manifests_of(&report.objects, path))
}

/// The EC2NodeClasses, the NodePools, then the NodeOverlays and
/// CapacityBuffers of configuration objects, as the simulation applies
/// them (sync's order); `path` prefixes their files in messages.
pub fn manifests_of(objects: &[validate::Object], path: &str) -> Vec<Manifest> {
    ApiKind::SYNCED
        .into_iter()
        .flat_map(|kind| objects.iter().filter(move |o| o.kind == kind))
        .map(|o| Manifest {
            object: o.value.clone(),
            file: format!("{path}/{}", o.file),
            pos: o.pos,
        })
        .collect()
}

/// dovetail's controller as the simulation runs it.
fn new_controller(
    cluster: &Arc<MemoryCluster>,
    cloud: &Arc<SimEc2>,
    clock: Arc<dyn Clock>,
    scenario: &Scenario,
) -> Controller<MemoryCluster, SimEc2> {
    let gates = scenario.feature_gates;
    Controller::new(
        cluster.clone(),
        cloud.clone(),
        clock,
        Settings {
            resync: SIM_RESYNC,
            // Prices and offerings of the simulated EC2 change only
            // through what the passes see change.
            disruption_resync: SIM_RESYNC,
            spot_to_spot_consolidation: gates.spot_to_spot_consolidation,
            static_capacity: gates.static_capacity,
            node_repair: gates.node_repair,
            launch_concurrency: scenario.launch_concurrency,
            preferences: scenario.preferences,
            node_overlay: gates.node_overlay,
            capacity_buffer: gates.capacity_buffer,
            ..Settings::default()
        },
    )
}

fn at(start: Timestamp, offset: Duration) -> Timestamp {
    start.checked_add(offset).unwrap_or(start)
}

impl Simulation {
    /// Sets up the cluster, the cloud and the controller for a scenario:
    /// loads and validates the configuration repository and applies it, and
    /// restores the initial cluster state.
    pub fn new(
        scenario: Scenario,
        catalog_override: Option<&std::path::Path>,
    ) -> Result<Self, SimError> {
        let config = load_config(&scenario.config)?;
        Self::with_config(scenario, catalog_override, config)
    }

    /// [`Simulation::new`] with the configuration given: its EC2NodeClasses
    /// and NodePools, validated, in the order they are applied (a forecast
    /// runs one revision of a repository, or the live cluster's). The
    /// scenario's `config` is then only where its `commit` steps write.
    pub fn with_config(
        scenario: Scenario,
        catalog_override: Option<&std::path::Path>,
        objects: Vec<Manifest>,
    ) -> Result<Self, SimError> {
        let start = scenario.start;
        let clock = Arc::new(ManualClock::new(start));
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let cluster = Arc::new(
            MemoryCluster::new(dyn_clock.clone())
                .with_watch_log_capacity(WATCH_LOG)
                .with_default_termination_grace_period(scenario.pods.termination_grace_period),
        );
        crate::world::apiserver::admission::register(&cluster)
            .map_err(|e| SimError::Setup(e.to_string()))?;

        let catalog_path = catalog_override
            .map(Into::into)
            .or_else(|| scenario.catalog.clone());
        let catalog = match &catalog_path {
            Some(p) => SimEc2::load_catalog(p),
            None => SimEc2::builtin_catalog(),
        }
        .map_err(|e| SimError::Setup(e.to_string()))?;
        let mut config =
            scenario
                .cloud
                .sim_config(catalog, &scenario.region, &scenario.zones, start);
        // The report counts the calls; keeping each (a drift check per
        // NodeClaim per pass) grew a day of 2,000 nodes by gigabytes.
        config.call_log = false;
        let cloud = Arc::new(SimEc2::new(config, dyn_clock.clone()));
        let catalog = cloud.catalog().to_vec();

        for m in &objects {
            apply(&cluster, m)?;
        }
        for m in scenario.initial.iter() {
            apply_as(&cluster, m, true)?;
        }
        adopt_initial_nodes(&cluster, &cloud, start)?;

        let controller = new_controller(&cluster, &cloud, dyn_clock, &scenario);
        // Timers and I/O for an external EC2 (`simulate --serve
        // --ec2-endpoint`); the simulation itself keeps virtual time.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SimError::Setup(e.to_string()))?;
        // The initial state's nodes and pods are known before the first
        // pass, which may already disrupt them.
        let mut recorder = Recorder::new(start);
        recorder.observe(&cluster, &cloud.instances_now(), start);
        Ok(Simulation {
            kubelet: Kubelet::new(scenario.cloud.launch_delay)
                .with_kubernetes_version(&scenario.cloud.kubernetes_version),
            volumes: AttachDetach::new(
                scenario.cloud.volume_attach_delay,
                scenario.cloud.volume_detach_delay,
            ),
            scheduler: KubeScheduler::new(),
            workloads: Workloads::default(),
            recorder,
            scenario,
            clock,
            cluster,
            cloud,
            controller: tokio::sync::Mutex::new(controller),
            catalog,
            runtime,
            ticks: 0,
            changed_ticks: 0,
            config_repo: None,
            last_sample: None,
            bound: None,
            workload_pods: None,
            interruption_handling: Vec::new(),
            metrics: None,
            in_process: true,
            external: None,
            compact_through: Some(0),
        })
    }

    /// Keeps each kind's watch log to its capacity instead of compacting it
    /// at every tick: for a reader of the run's history once it is over
    /// (a test that follows an object version by version).
    pub fn keeping_watch_history(mut self) -> Self {
        self.compact_through = None;
        self
    }

    /// Keeps the controller's metrics, as `dovetail controller` serves them
    /// on `/metrics` (its registries and the families computed from the
    /// cluster), for [`Report::metrics`]: the gather at the end of the run,
    /// and with `every`, one at the start and then every `every` of
    /// simulated time, each as the cluster stood at that time. `labels` are
    /// added to every sample where it lacks them (a scrape's target labels,
    /// such as `job`).
    pub fn with_metrics(mut self, every: Option<Duration>, labels: Vec<(String, String)>) -> Self {
        self.metrics = Some(MetricsPlan {
            labels,
            every: every.filter(|d| !d.is_zero()),
            next: every.map(|_| self.scenario.start),
            series: crate::metrics::exposition::Series::new(),
            last: None,
        });
        self
    }

    /// Every family the controller serves on `/metrics` now.
    fn gather_metrics(&mut self) -> Vec<prometheus::proto::MetricFamily> {
        let controller = self.controller.get_mut();
        let mut registries = vec![
            controller.metrics.registry(),
            controller.interruption_metrics.registry(),
        ];
        if let Some(repo) = &self.config_repo {
            registries.push(repo.metrics_registry());
        }
        let mut families = crate::controller::runtime::gather(self.cluster.as_ref(), &registries);
        if let Some(plan) = &self.metrics {
            crate::metrics::exposition::add_labels(&mut families, &plan.labels);
        }
        families
    }

    /// Takes the snapshots due before `before` (the cluster does not change
    /// until then: the next pass is at `before`), each at its own time.
    fn snapshots_before(&mut self, before: Timestamp) {
        loop {
            let Some(plan) = &self.metrics else { return };
            let (Some(every), Some(due)) = (plan.every, plan.next) else {
                return;
            };
            if due >= before {
                return;
            }
            // Summaries age on the clock: read them at the snapshot's time.
            let _ = self.clock.set(due);
            let families = self.gather_metrics();
            if let Some(plan) = &mut self.metrics {
                plan.series.add(&families, due);
                plan.last = Some(due);
                plan.next = due.checked_add(every).ok();
            }
        }
    }

    /// The in-memory API server the controller runs against, which keeps
    /// the log of the controller's writes ([`MemoryCluster::accesses`]).
    /// The scenario being run.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    pub fn cluster(&self) -> Arc<MemoryCluster> {
        self.cluster.clone()
    }

    fn run_step(&mut self, action: &Action) -> Result<(), SimError> {
        let now = self.clock.now();
        match action {
            Action::Apply(ms) => {
                for m in ms {
                    apply(&self.cluster, m)?;
                    self.recorder
                        .event(now, object_name(&m.object), "Applied", String::new());
                }
            }
            Action::Scale {
                namespace,
                name,
                replicas,
            } => {
                let key = ObjectKey::new(namespace.clone(), name.clone());
                let Some(d) = self.cluster.get_opt::<Deployment>(&key) else {
                    return Err(SimError::Setup(format!(
                        "scale: Deployment {key} does not exist"
                    )));
                };
                let mut d = (*d).clone();
                d.spec.replicas = Some(i32::try_from(*replicas).unwrap_or(i32::MAX));
                self.cluster
                    .replace(d)
                    .map_err(|e| SimError::Setup(format!("scale {key}: {e}")))?;
                self.recorder.event(
                    now,
                    format!("Deployment/{key}"),
                    "Scaled",
                    format!("to {replicas} replicas"),
                );
            }
            Action::Delete {
                kind,
                namespace,
                name,
                selector,
            } => {
                let sel = match selector.as_deref() {
                    Some(s) => Selector::parse(s)
                        .map_err(|e| SimError::Setup(format!("delete: selector {s:?}: {e}")))?,
                    None => Selector::everything(),
                };
                let (ns, nm) = (namespace.as_deref(), name.as_deref());
                let n = match kind.as_str() {
                    "Pod" => delete_matching::<Pod>(&self.cluster, ns, nm, &sel),
                    "Deployment" => delete_matching::<Deployment>(&self.cluster, ns, nm, &sel),
                    "ReplicaSet" => delete_matching::<ReplicaSet>(&self.cluster, ns, nm, &sel),
                    "StatefulSet" => delete_matching::<StatefulSet>(&self.cluster, ns, nm, &sel),
                    "Job" => delete_matching::<Job>(&self.cluster, ns, nm, &sel),
                    "DaemonSet" => delete_matching::<DaemonSet>(&self.cluster, ns, nm, &sel),
                    "NodePool" => delete_matching::<NodePool>(&self.cluster, ns, nm, &sel),
                    "NodeOverlay" => delete_matching::<NodeOverlay>(&self.cluster, ns, nm, &sel),
                    "CapacityBuffer" => {
                        delete_matching::<CapacityBuffer>(&self.cluster, ns, nm, &sel)
                    }
                    "PodTemplate" => delete_matching::<PodTemplate>(&self.cluster, ns, nm, &sel),
                    "NodeClaim" => delete_matching::<NodeClaim>(&self.cluster, ns, nm, &sel),
                    "Node" => delete_matching::<Node>(&self.cluster, ns, nm, &sel),
                    other => {
                        return Err(SimError::Setup(format!(
                            "delete: unsupported kind {other:?}"
                        )));
                    }
                };
                self.recorder
                    .event(now, kind.clone(), "Deleted", format!("{n} object(s)"));
            }
            Action::Advance(_) => {}
            Action::PublishImage { family, release } => {
                let release = if release.is_empty() {
                    self.next_release(family)
                } else {
                    release.clone()
                };
                self.cloud
                    .publish_image(family, &release)
                    .map_err(SimError::Setup)?;
                self.recorder.event(
                    now,
                    format!("Image/{family}"),
                    "ImagePublished",
                    format!("{family}@latest is now {release}"),
                );
            }
            Action::UpgradeKubernetes { version } => {
                let before = self.cloud.account().kubernetes_version;
                self.cloud.upgrade_kubernetes(version);
                self.recorder.event(
                    now,
                    "Cluster/kubernetes".into(),
                    "KubernetesUpgraded",
                    format!("from {before} to {version}"),
                );
            }
            Action::Restart => {
                let clock: Arc<dyn Clock> = self.clock.clone();
                self.controller = tokio::sync::Mutex::new(new_controller(
                    &self.cluster,
                    &self.cloud,
                    clock,
                    &self.scenario,
                ));
                self.recorder.event(
                    now,
                    "Controller/dovetail".into(),
                    "Restarted",
                    "the controller restarted; its in-memory state is gone".into(),
                );
            }
            Action::Interrupt(step) => self.interrupt(step)?,
            Action::NodeCondition(step) => self.node_condition(step)?,
            Action::Commit(step) => {
                let repo = match self.config_repo.as_mut() {
                    Some(repo) => repo,
                    None => self.config_repo.insert(
                        ConfigRepo::new(
                            &self.scenario.config,
                            self.cluster.clone(),
                            self.clock.clone(),
                            self.scenario.start,
                            self.scenario.feature_gates,
                        )
                        .map_err(SimError::Setup)?,
                    ),
                };
                let events = self
                    .runtime
                    .block_on(repo.commit(step, now))
                    .map_err(SimError::Setup)?;
                for (object, reason, message) in events {
                    self.recorder.event(now, object, reason, message);
                }
            }
        }
        Ok(())
    }

    /// The instances an `interrupt` step is about, by id.
    /// The nodes a step's selector matches, not being deleted, by name.
    fn selected_nodes(&self, step: &str, s: &str) -> Result<Vec<Arc<Node>>, SimError> {
        let sel = Selector::parse(s)
            .map_err(|e| SimError::Setup(format!("{step}: selector {s:?}: {e}")))?;
        let mut nodes = self.cluster.list::<Node>(None, &sel).items;
        nodes.retain(|n| n.metadata.deletion_timestamp.is_none());
        nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(nodes)
    }

    fn interrupt_targets(&self, step: &InterruptStep) -> Result<Vec<String>, SimError> {
        let instance_of = |node: &Node| {
            node.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(crate::interruption::instance_id_of)
                .map(str::to_string)
        };
        match &step.target {
            InterruptTarget::Instance(id) => Ok(vec![id.clone()]),
            InterruptTarget::Node(name) => {
                let node = self
                    .cluster
                    .get_opt::<Node>(&ObjectKey::cluster(name.as_str()))
                    .ok_or_else(|| {
                        SimError::Setup(format!("interrupt: node {name:?} does not exist"))
                    })?;
                instance_of(&node).map(|id| vec![id]).ok_or_else(|| {
                    SimError::Setup(format!("interrupt: node {name:?} has no EC2 instance"))
                })
            }
            InterruptTarget::Selector(s) => {
                let nodes = self.selected_nodes("interrupt", s)?;
                Ok(nodes
                    .iter()
                    .filter_map(|n| instance_of(n))
                    .take(step.count.unwrap_or(usize::MAX))
                    .collect())
            }
        }
    }

    /// The `nodeCondition` step: the kubelet reports a condition on the
    /// nodes named; its transition time is now when its status changes.
    fn node_condition(&mut self, step: &NodeConditionStep) -> Result<(), SimError> {
        use k8s_openapi::api::core::v1::NodeCondition;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let now = self.clock.now();
        let names: Vec<String> = match &step.target {
            InterruptTarget::Node(name) => {
                if self
                    .cluster
                    .get_opt::<Node>(&ObjectKey::cluster(name.as_str()))
                    .is_none()
                {
                    return Err(SimError::Setup(format!(
                        "nodeCondition: node {name:?} does not exist"
                    )));
                }
                vec![name.clone()]
            }
            InterruptTarget::Instance(id) => {
                return Err(SimError::Setup(format!(
                    "nodeCondition: names nodes, not instances ({id})"
                )));
            }
            InterruptTarget::Selector(s) => self
                .selected_nodes("nodeCondition", s)?
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .take(step.count.unwrap_or(usize::MAX))
                .collect(),
        };
        for name in names {
            let key = ObjectKey::cluster(name.as_str());
            let Some(node) = self.cluster.get_opt::<Node>(&key) else {
                continue;
            };
            let mut updated = (*node).clone();
            let conditions = updated
                .status
                .get_or_insert_with(Default::default)
                .conditions
                .get_or_insert_with(Vec::new);
            let t = Time(now);
            match conditions.iter_mut().find(|c| c.type_ == step.type_) {
                Some(c) => {
                    if c.status != step.status {
                        c.last_transition_time = Some(t.clone());
                    }
                    c.status.clone_from(&step.status);
                    c.last_heartbeat_time = Some(t);
                    c.reason = Some("SimulatedCondition".into());
                }
                None => conditions.push(NodeCondition {
                    type_: step.type_.clone(),
                    status: step.status.clone(),
                    reason: Some("SimulatedCondition".into()),
                    last_heartbeat_time: Some(t.clone()),
                    last_transition_time: Some(t),
                    ..NodeCondition::default()
                }),
            }
            self.cluster
                .update_status(updated)
                .map_err(|e| SimError::Setup(format!("nodeCondition: node {name:?}: {e}")))?;
            self.recorder.event(
                now,
                format!("Node/{name}"),
                "NodeCondition",
                format!("{}={}", step.type_, step.status),
            );
        }
        Ok(())
    }

    /// The `interrupt` step: the simulated EC2 sends the event, and it is
    /// delivered to the controller through the same code as a message
    /// from the interruption queue.
    fn interrupt(&mut self, step: &InterruptStep) -> Result<(), SimError> {
        use crate::interruption::{Kind, Outcome, deliver};
        let now = self.clock.now();
        let ids = self.interrupt_targets(step)?;
        let kind = step.kind;
        if ids.is_empty() {
            self.recorder.event(
                now,
                "Interruption/step".into(),
                "NoInstance",
                format!("{kind}: no node matches; nothing sent"),
            );
            return Ok(());
        }
        let bodies = self
            .cloud
            .interrupt(kind, &ids, step.state)
            .map_err(|e| SimError::Setup(format!("interrupt ({kind}): {e}")))?;
        for id in &ids {
            let (reason, message) = match kind {
                Kind::SpotInterruption => (
                    "SpotInterruptionWarning",
                    format!(
                        "EC2 will reclaim spot instance {id} in {}s",
                        crate::world::ec2::SPOT_RECLAIM_NOTICE.as_secs()
                    ),
                ),
                Kind::Rebalance => (
                    "RebalanceRecommendation",
                    format!("EC2 recommends rebalancing away from {id}"),
                ),
                Kind::ScheduledChange => (
                    "ScheduledChange",
                    format!("AWS Health schedules the retirement of {id}"),
                ),
                Kind::StateChange => (
                    "StateChange",
                    format!(
                        "instance {id} is {}",
                        step.state
                            .unwrap_or(crate::interruption::InstanceState::Terminated)
                    ),
                ),
            };
            self.recorder
                .event(now, format!("Instance/{id}"), reason, message);
        }
        let metrics = self.controller.get_mut().interruption_metrics.clone();
        for body in &bodies {
            let received = std::time::Instant::now();
            let handler = crate::controller::interruption::Handler::new(self.controller.get_mut());
            let outcome = self.runtime.block_on(self.clock.run(deliver(
                body,
                Some(now),
                now,
                &handler,
                &metrics,
            )));
            self.interruption_handling.push(received.elapsed());
            match outcome {
                Outcome::Handled(_) | Outcome::Ignored(_) => {}
                Outcome::Undecodable(e) => {
                    return Err(SimError::Setup(format!(
                        "interrupt: the simulated EC2 sent an event the controller cannot read: {e}"
                    )));
                }
                Outcome::Failed(e) => self.recorder.event(
                    now,
                    "Interruption/handler".into(),
                    "HandlerFailed",
                    e.to_string(),
                ),
            }
        }
        Ok(())
    }

    /// A release name for an image published without one: `v` and the
    /// virtual date, with a counter if that day already has one.
    fn next_release(&self, family: &str) -> String {
        let date = crate::clock::format_rfc3339(self.clock.now());
        let base = format!("v{}", date.get(..10).unwrap_or_default().replace('-', ""));
        let existing = self
            .cloud
            .account()
            .releases
            .get(family)
            .cloned()
            .unwrap_or_default();
        let mut release = base.clone();
        let mut n = 1;
        while existing.contains(&release) {
            n += 1;
            release = format!("{base}.{n}");
        }
        release
    }

    /// One pass of every actor at the current time; whether anything changed.
    fn tick(&mut self) -> (bool, Duration) {
        let now = self.clock.now();
        let reclaimed = self.cloud.take_reclaimed();
        for (t, id) in &reclaimed {
            self.recorder.event(
                *t,
                format!("Instance/{id}"),
                "SpotReclaimed",
                "EC2 reclaimed the spot instance two minutes after its interruption warning".into(),
            );
        }
        let w = self.workloads.sync(&self.cluster, now);
        let s = self.scheduler.schedule(&self.cluster, now);
        let pass = if self.in_process {
            // Calls to the simulated EC2 take its latency on the virtual
            // clock: a pass that waits for them moves the time forward.
            let clock = self.clock.clone();
            self.runtime
                .block_on(clock.run(crate::controller::pass(&self.controller)))
        } else {
            let c = self.controller.get_mut();
            crate::controller::PassOutcome {
                wait: Duration::MAX,
                events: c.drain_events(),
                decisions: c.drain_decisions(),
            }
        };
        let budgets = self.workloads.disruption_budgets(&self.cluster);
        let instances = match self.external.as_mut() {
            None => self.cloud.instances_now(),
            Some(ext) => {
                if ext
                    .listed
                    .is_none_or(|t| t.elapsed() >= EXTERNAL_LIST_EVERY)
                {
                    match self.runtime.block_on(ext.ec2.list(&self.catalog)) {
                        Ok(list) => ext.instances = list.into_iter().map(Arc::new).collect(),
                        Err(error) => tracing::warn!(%error, "cannot list the EC2 instances"),
                    }
                    ext.listed = Some(std::time::Instant::now());
                }
                Arc::new(ext.instances.clone())
            }
        };
        let k = self
            .kubelet
            .sync(&self.cluster, &instances, &self.catalog, now);
        let v = self.volumes.sync(&self.cluster, now);
        let crate::controller::PassOutcome {
            wait: wake_c,
            events,
            decisions,
        } = pass;
        let changed = !w.created.is_empty()
            || !w.deleted.is_empty()
            || !s.bound.is_empty()
            || !k.is_empty()
            || !v.is_empty()
            || !events.is_empty()
            || !reclaimed.is_empty()
            || budgets > 0;
        self.recorder.controller_events(events);
        self.recorder.decisions(decisions);
        self.recorder.kubelet(now, &k);
        self.recorder.volumes(now, &v);
        self.recorder.observe(&self.cluster, &instances, now);
        // Every watcher of the logs (the stand-ins, the report, the
        // controller's pod views) reads them at every tick: the events
        // before this one are read by all, and held they would keep every
        // version of every pod written since the start.
        if let Some(through) = self.compact_through.as_mut() {
            self.cluster.compact_watch_logs_through(*through);
            *through = self.cluster.resource_version();
        }
        // The next time something is due on its own.
        let mut wake = wake_c;
        for i in instances.iter() {
            if let Some(ready) = self.kubelet.ready_at(i)
                && ready > now
            {
                wake = wake.min(Duration::try_from(ready.duration_since(now)).unwrap_or_default());
            }
        }
        // Kubelets delete terminating pods when their grace period ends,
        // and mark Job pods succeeded when their run ends.
        for t in [self.kubelet.next_stop(), self.kubelet.next_job_done()]
            .into_iter()
            .flatten()
            .filter(|t| *t > now)
        {
            wake = wake.min(Duration::try_from(t.duration_since(now)).unwrap_or_default());
        }
        // Volumes attach and detach after their delays.
        if let Some(t) = self.volumes.next_due()
            && t > now
        {
            wake = wake.min(Duration::try_from(t.duration_since(now)).unwrap_or_default());
        }
        // EC2 reclaims interrupted spot instances on its own schedule.
        if let Some(t) = self.cloud.next_reclaim() {
            wake = wake.min(Duration::try_from(t.duration_since(now)).unwrap_or_default());
        }
        // Job pods not running yet have no end to wake for: poll while any
        // Job pod is active.
        if self.recorder.active_job_pods() > 0 {
            wake = wake.min(MAX_STEP);
        }
        tracing::trace!(controller = ?wake_c, ?wake, changed, "tick");
        (changed, wake)
    }

    /// The lower bound of the workload now, computed again only when the
    /// set of pods that need capacity or the configuration changed: binding
    /// a pod, its status or a DaemonSet pod (the bound counts DaemonSets as
    /// overhead) does not change the bound, and the bound is a whole solve.
    fn lower_bound(&mut self) -> Option<f64> {
        use std::hash::{Hash, Hasher};
        let pod_revision = self.cluster.kind_revision::<Pod>();
        let workload = match self.workload_pods {
            Some((r, h)) if r == pod_revision => h,
            _ => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                for p in self
                    .cluster
                    .list::<Pod>(None, &Selector::everything())
                    .items
                {
                    let finished = crate::api::pod::is_finished(&p);
                    let daemon = crate::api::pod::is_daemon_owned(&p.metadata);
                    if !finished && !daemon && p.metadata.deletion_timestamp.is_none() {
                        p.metadata.uid.hash(&mut h);
                        p.metadata.name.hash(&mut h);
                    }
                }
                let h = h.finish();
                self.workload_pods = Some((pod_revision, h));
                h
            }
        };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        workload.hash(&mut h);
        self.cluster.kind_revision::<NodePool>().hash(&mut h);
        self.cluster.kind_revision::<EC2NodeClass>().hash(&mut h);
        self.cluster.kind_revision::<DaemonSet>().hash(&mut h);
        self.cluster
            .kind_revision::<PersistentVolume>()
            .hash(&mut h);
        self.cluster
            .kind_revision::<PersistentVolumeClaim>()
            .hash(&mut h);
        self.cluster.kind_revision::<StorageClass>().hash(&mut h);
        self.controller
            .get_mut()
            .unavailable
            .active(self.clock.now())
            .hash(&mut h);
        let revision = h.finish();
        if let Some((r, b)) = self.bound
            && r == revision
        {
            return b;
        }
        let b = self
            .runtime
            .block_on(self.controller.get_mut().workload_lower_bound());
        self.bound = Some((revision, b));
        b
    }

    /// Samples the fleet for the report every [`FLEET_SAMPLE`].
    fn sample_fleet(&mut self, now: Timestamp) {
        if self.last_sample.is_some_and(|t| {
            Duration::try_from(now.duration_since(t)).unwrap_or_default() < FLEET_SAMPLE
        }) {
            return;
        }
        self.last_sample = Some(now);
        let bound = self.lower_bound();
        self.recorder.fleet_point(now, bound);
    }

    /// Runs the whole scenario and returns the report.
    pub fn run(self, until: Option<Duration>) -> Result<Report, SimError> {
        self.run_reporting(until, None)
    }

    /// Runs the whole scenario, telling `progress` how far it has got.
    pub fn run_reporting(
        mut self,
        until: Option<Duration>,
        mut progress: Option<&mut ProgressReporter<'_>>,
    ) -> Result<Report, SimError> {
        let start = self.scenario.start;
        let end = at(start, until.unwrap_or(self.scenario.until));
        let steps = std::mem::take(&mut self.scenario.steps);
        let mut next_step = 0;
        loop {
            let now = self.clock.now();
            while next_step < steps.len() && at(start, steps[next_step].at) <= now {
                let action = steps[next_step].action.clone();
                self.run_step(&action)?;
                next_step += 1;
            }
            let (changed, wake) = self.tick();
            self.sample_fleet(now);
            self.ticks += 1;
            if changed {
                self.changed_ticks += 1;
            }
            if let Some(p) = progress.as_deref_mut()
                && p.due()
            {
                p.report(&self.recorder.progress(now, end));
            }
            // A pass that waited for the simulated EC2 (`cloud.apiLatency`)
            // took virtual time: carry on from where it left the clock.
            let now = self.clock.now();
            if now >= end {
                break;
            }
            let mut next = at(
                now,
                if changed {
                    SETTLE_STEP
                } else {
                    wake.max(SETTLE_STEP)
                },
            );
            if let Some(s) = steps.get(next_step) {
                next = next.min(at(start, s.at));
            }
            next = next.min(end).max(at(now, SETTLE_STEP).min(end));
            self.snapshots_before(next);
            if self.clock.set(next).is_err() {
                break;
            }
        }
        self.finish()
    }

    /// Runs the scenario in real time (times `speed` with the in-process
    /// controller) for `simulate --serve`, until its end or until stopped:
    /// the scenario's steps at their offsets from the start, and a pass of
    /// every actor whenever something may be due, at most
    /// `SERVED_PAUSE` apart so that writes through the served API are
    /// acted on promptly.
    pub fn run_served(mut self, served: Served) -> Result<Report, SimError> {
        use std::sync::atomic::Ordering;
        self.in_process = served.in_process;
        // Clients watch the served cluster: its logs keep their capacity.
        self.compact_through = None;
        if !served.in_process {
            // No controller holds the Nodes of gone instances: the cloud's
            // node lifecycle controller removes them once NotReady.
            let kubelet = std::mem::replace(&mut self.kubelet, Kubelet::new(Duration::ZERO));
            self.kubelet = kubelet.with_node_lifecycle(NODE_MONITOR_GRACE);
        }
        if let Some(ec2) = served.ec2 {
            self.external = Some(External {
                ec2,
                instances: Vec::new(),
                listed: None,
            });
        }
        let speed = if served.in_process {
            served.speed.max(f64::MIN_POSITIVE)
        } else {
            1.0
        };
        let start = self.scenario.start;
        let end = at(start, self.scenario.until);
        let steps = std::mem::take(&mut self.scenario.steps);
        let mut next_step = 0;
        self.cluster.ensure_namespaces();
        self.clock.follow_wall(speed);
        while !served.stop.load(Ordering::Relaxed) {
            let now = self.clock.now();
            let mut stepped = false;
            while next_step < steps.len() && at(start, steps[next_step].at) <= now {
                let action = steps[next_step].action.clone();
                self.run_step(&action)?;
                next_step += 1;
                stepped = true;
            }
            if stepped {
                self.cluster.ensure_namespaces();
            }
            let (changed, wake) = self.tick();
            self.sample_fleet(now);
            self.ticks += 1;
            if changed {
                self.changed_ticks += 1;
            }
            if now >= end {
                break;
            }
            // Bounded before scaling: `wake` may be "never".
            let mut pause = if changed {
                Duration::ZERO
            } else {
                wake.min(SERVED_PAUSE.mul_f64(speed)).div_f64(speed)
            };
            if let Some(s) = steps.get(next_step) {
                let due =
                    Duration::try_from(at(start, s.at).duration_since(now)).unwrap_or_default();
                pause = pause.min(due.div_f64(speed));
            }
            std::thread::sleep(pause.clamp(Duration::from_millis(10), SERVED_PAUSE));
        }
        self.finish()
    }

    /// The report at the end of a run.
    fn finish(mut self) -> Result<Report, SimError> {
        tracing::debug!(
            ticks = self.ticks,
            changed_ticks = self.changed_ticks,
            "simulation loop finished"
        );
        let end_at = self.clock.now();
        let run_metrics = self.metrics.is_some().then(|| {
            // The last snapshots, up to and at the end.
            self.snapshots_before(at(end_at, Duration::from_millis(1)));
            let _ = self.clock.set(end_at);
            let families = self.gather_metrics();
            let mut plan = self.metrics.take().unwrap_or_else(|| MetricsPlan {
                labels: Vec::new(),
                every: None,
                next: None,
                series: crate::metrics::exposition::Series::new(),
                last: None,
            });
            if plan.every.is_some() && plan.last != Some(end_at) {
                plan.series.add(&families, end_at);
            }
            super::report::RunMetrics {
                families,
                series: plan.every.map(|_| plan.series),
            }
        });
        let lower_bound = self.lower_bound();
        self.recorder.fleet_point(end_at, lower_bound);
        let unschedulable: BTreeMap<String, String> =
            self.controller.get_mut().unschedulable().clone();
        let calls = self.cloud.call_count();
        let gap = super::report::gap(&self.cluster);
        let usage = super::report::usage_by_pool(&self.cluster);
        let mut report = self.recorder.finish(
            self.clock.now(),
            lower_bound,
            unschedulable,
            calls,
            gap,
            &usage,
        );
        report.blocked = self.controller.get_mut().blocked().cloned().collect();
        report.interruption_handling = std::mem::take(&mut self.interruption_handling);
        report.interruption_metrics = Some(self.controller.get_mut().interruption_metrics.clone());
        report.metrics = run_metrics;
        Ok(report)
    }
}

/// Tells a person how far a long run has got: after `after` of wall time,
/// then every `every`, it hands the run's [`Progress`] to its sink (the
/// command line prints it on stderr when that is a terminal).
pub struct ProgressReporter<'a> {
    started: std::time::Instant,
    after: Duration,
    every: Duration,
    last: Option<std::time::Instant>,
    sink: Box<dyn FnMut(&Progress) + 'a>,
}

impl<'a> ProgressReporter<'a> {
    pub fn new(after: Duration, every: Duration, sink: impl FnMut(&Progress) + 'a) -> Self {
        ProgressReporter {
            started: std::time::Instant::now(),
            after,
            every,
            last: None,
            sink: Box::new(sink),
        }
    }

    /// Whether a report is due now (and if so, counts it as made).
    fn due(&mut self) -> bool {
        let now = std::time::Instant::now();
        if now.duration_since(self.started) < self.after
            || self
                .last
                .is_some_and(|l| now.duration_since(l) < self.every)
        {
            return false;
        }
        self.last = Some(now);
        true
    }

    fn report(&mut self, p: &Progress) {
        (self.sink)(p);
    }

    /// Whether anything was reported.
    pub fn shown(&self) -> bool {
        self.last.is_some()
    }
}

/// `Kind/namespace/name` for a namespaced object (its namespace, else
/// `default`), `Kind/name` for a cluster-scoped one: the names the report's
/// events use throughout.
fn object_name(o: &Value) -> String {
    let kind = o.get("kind").and_then(Value::as_str).unwrap_or("object");
    let name = o
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?");
    const CLUSTER_SCOPED: [&str; 7] = [
        "Node",
        "NodePool",
        "NodeClaim",
        "EC2NodeClass",
        "PersistentVolume",
        "StorageClass",
        "Namespace",
    ];
    if CLUSTER_SCOPED.contains(&kind) {
        return format!("{kind}/{name}");
    }
    let ns = o
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    format!("{kind}/{ns}/{name}")
}
