//! The scenario file of `dovetail simulate`: where the configuration and the
//! catalog come from, the initial cluster, the simulated cloud's behaviour,
//! and a timeline of steps at virtual times. Documented in `docs/simulate.md`
//! with a JSON Schema in `schemas/scenario.schema.json`.
//!
//! Parsing works on the positioned YAML tree, so every problem names the
//! scenario file, line and column of the offending node.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value as Json;

use crate::clock::{Timestamp, parse_rfc3339};
use crate::config::yaml::{self, Limits, Node, Value};
use crate::diag::{Diagnostic, JsonPath, Pos};
use crate::timing::{DurationSyntax, NillableDuration, parse_duration};
use crate::world::ec2::nodeclass::{
    DEFAULT_KUBERNETES_VERSION, FAMILIES, SimImage, SimSecurityGroup, SimSubnet,
};
use crate::world::ec2::{DEFAULT_LAUNCH_DELAY, DEFAULT_REGION, default_zones};

/// Budget schedules depend on the weekday and hour, so the default start is
/// a known Monday at midnight UTC.
pub const DEFAULT_START: &str = "2026-01-05T00:00:00Z";
/// How long a simulation runs after its last step when `until` is not set.
pub const DEFAULT_TAIL: Duration = Duration::from_secs(30 * 60);

/// A parsed, checked scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The scenario file as given (used in messages).
    pub file: String,
    pub start: Timestamp,
    /// The configuration repository, resolved against the scenario's folder.
    pub config: PathBuf,
    /// Where `config` is written in the scenario.
    pub config_pos: Pos,
    pub catalog: Option<PathBuf>,
    pub region: String,
    pub zones: Vec<String>,
    /// Where `zones` (or, without it, `region`) is written in the scenario.
    pub zones_pos: Pos,
    /// Objects of the initial cluster state, in the snapshot format
    /// (shared: a forecast starts two simulations from one snapshot).
    pub initial: std::sync::Arc<[Manifest]>,
    pub cloud: CloudSettings,
    /// How the cluster treats pods (`pods:`).
    pub pods: PodSettings,
    /// The controller's feature gates (`settings: {featureGates: ...}`).
    pub feature_gates: crate::controller::features::FeatureGates,
    /// How many launches the controller sends at once
    /// (`settings: {launchConcurrency: N}`).
    pub launch_concurrency: usize,
    /// How the controller treats preferences
    /// (`settings: {preferencePolicy: Respect|Ignore}`).
    pub preferences: crate::scheduling::Preferences,
    pub steps: Vec<Step>,
    /// Offset from `start` at which the simulation ends.
    pub until: Duration,
    /// Faults of the served API (`simulate --serve`).
    pub faults: Vec<crate::world::faults::FaultRule>,
}

/// `faults:`: a list of maps with the keys of `--fault` (`verb` and
/// `resource` may be lists).
fn faults(ctx: &Ctx<'_>, n: &Node) -> Result<Vec<crate::world::faults::FaultRule>, ScenarioError> {
    let Value::Seq(items) = &n.value else {
        return Err(ctx.err(n, "faults must be a list of faults such as {verb: create, resource: nodeclaims, status: 429, retryAfter: 1}"));
    };
    let mut out = Vec::new();
    for item in items {
        let Value::Map(entries) = &item.value else {
            return Err(ctx.err(item, "a fault is a map of verb, resource, latency, status, retryAfter, dropWatchAfter, writeTimeout and times"));
        };
        let mut terms = Vec::new();
        for (key, value) in entries {
            let scalar = |v: &Node| match &v.value {
                Value::Str(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err(ctx.err(v, format!("fault {}: a string or a number", key.name))),
            };
            let text = match &value.value {
                Value::Seq(vs) => vs
                    .iter()
                    .map(scalar)
                    .collect::<Result<Vec<_>, _>>()?
                    .join("|"),
                _ => scalar(value)?,
            };
            terms.push(format!("{}={text}", key.name));
        }
        out.push(
            crate::world::faults::FaultRule::parse(&terms.join(","))
                .map_err(|e| ctx.err(item, e))?,
        );
    }
    Ok(out)
}

/// A Kubernetes object from the scenario, with where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub object: Json,
    pub file: String,
    pub pos: Pos,
}

impl Manifest {
    pub fn kind(&self) -> &str {
        self.object
            .get("kind")
            .and_then(Json::as_str)
            .unwrap_or_default()
    }
}

/// How the simulated EC2 behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudSettings {
    /// From `RunInstances` to the node registering with the cluster.
    pub launch_delay: Duration,
    pub insufficient_capacity: Vec<CapacityWindow>,
    /// Periods in which every launch fails (`cloud.launchErrors`).
    pub launch_errors: Vec<LaunchErrorWindow>,
    /// How long each EC2 API call takes to answer (`cloud.apiLatency`).
    pub api_latency: Duration,
    /// From a pod needing a volume on its node to its VolumeAttachment
    /// (`cloud.volumeAttachDelay`).
    pub volume_attach_delay: Duration,
    /// From no pod needing an attached volume to its VolumeAttachment's
    /// deletion (`cloud.volumeDetachDelay`).
    pub volume_detach_delay: Duration,
    /// The cluster's Kubernetes version: AMI aliases resolve for it.
    pub kubernetes_version: String,
    /// Images of the account, for `amiSelectorTerms` by id, name or tags.
    pub images: Vec<SimImage>,
    /// The VPC's subnets; unset: one per zone, selected by every term.
    pub subnets: Option<Vec<SimSubnet>>,
    /// The VPC's security groups; unset: one, selected by every term.
    pub security_groups: Option<Vec<SimSecurityGroup>>,
    /// What AMI aliases resolved to in the cluster the run starts from (a
    /// forecast's snapshot); not written in scenario files.
    pub observed_aliases: Vec<crate::world::ec2::nodeclass::ObservedAlias>,
    /// The account's capacity reservations (`cloud.reservations`).
    pub reservations: Vec<ReservationSpec>,
    /// The account's placement groups (`cloud.placementGroups`).
    pub placement_groups: Vec<crate::cloud::aws::placement::PlacementGroup>,
}

impl CloudSettings {
    /// The simulated EC2's configuration for these settings, in `region`
    /// and `zones`, with the scripted windows counted from `start`.
    pub fn sim_config(
        &self,
        catalog: Vec<crate::model::InstanceType>,
        region: &str,
        zones: &[String],
        start: Timestamp,
    ) -> crate::world::ec2::SimConfig {
        let at = |offset: Duration| start.checked_add(offset).unwrap_or(start);
        let mut config = crate::world::ec2::SimConfig::new(catalog);
        config.region = region.to_string();
        config.zones = zones.to_vec();
        config.launch_delay = self.launch_delay;
        config.kubernetes_version = self.kubernetes_version.clone();
        config.images = self.images.clone();
        config.subnets = self.subnets.clone();
        config.security_groups = self.security_groups.clone();
        config.placement_groups = self.placement_groups.clone();
        config.observed_aliases = self.observed_aliases.clone();
        config.insufficient_capacity = self
            .insufficient_capacity
            .iter()
            .map(|w| crate::world::ec2::CapacityWindow {
                instance_type: w.instance_type.clone(),
                zone: w.zone.clone(),
                capacity_type: w.capacity_type.clone(),
                from: at(w.from),
                until: w.until.map(&at),
            })
            .collect();
        config.reservations =
            self.reservations
                .iter()
                .map(|r| crate::world::ec2::reservations::SimReservation {
                    id: r.id.clone(),
                    instance_type: r.instance_type.clone(),
                    zone: r.zone.clone(),
                    count: r.count,
                    capacity_block: r.capacity_block,
                    instance_match_criteria: r.instance_match_criteria.clone(),
                    tags: r.tags.clone(),
                    owner_id: r.owner_id.clone().unwrap_or_else(|| {
                        crate::world::ec2::reservations::SIM_OWNER_ID.to_string()
                    }),
                    start: at(r.from),
                    end: r.until.map(&at),
                })
                .collect();
        config.call_latency = self.api_latency;
        config.launch_errors = self
            .launch_errors
            .iter()
            .map(|w| crate::world::ec2::LaunchErrorWindow {
                error: w.error.clone(),
                from: at(w.from),
                until: w.until.map(&at),
            })
            .collect();
        config
    }
}

impl Default for CloudSettings {
    fn default() -> Self {
        CloudSettings {
            launch_delay: DEFAULT_LAUNCH_DELAY,
            insufficient_capacity: Vec::new(),
            launch_errors: Vec::new(),
            api_latency: Duration::ZERO,
            volume_attach_delay: crate::world::volumes::DEFAULT_ATTACH_DELAY,
            volume_detach_delay: crate::world::volumes::DEFAULT_DETACH_DELAY,
            kubernetes_version: DEFAULT_KUBERNETES_VERSION.to_string(),
            images: Vec::new(),
            subnets: None,
            security_groups: None,
            observed_aliases: Vec::new(),
            reservations: Vec::new(),
            placement_groups: Vec::new(),
        }
    }
}

/// What the simulated API server assumes of pods.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSettings {
    /// The `terminationGracePeriodSeconds` of pods that do not set one
    /// (`pods: {terminationGracePeriod: 30s}`): how long a deleted pod
    /// takes to stop. Kubernetes defaults the field to 30 s.
    pub termination_grace_period: Duration,
}

impl Default for PodSettings {
    fn default() -> Self {
        PodSettings {
            termination_grace_period: DEFAULT_TERMINATION_GRACE_PERIOD,
        }
    }
}

/// The default of a pod's `terminationGracePeriodSeconds`.
pub const DEFAULT_TERMINATION_GRACE_PERIOD: Duration = Duration::from_secs(30);

/// A window during which matching offerings fail with insufficient capacity.
/// Unset filters match everything.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityWindow {
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    /// Offsets from the start.
    pub from: Duration,
    pub until: Option<Duration>,
}

/// A `cloud.reservations` entry: a capacity reservation of the simulated
/// account, active from `from` until `until` (offsets from the start).
#[derive(Debug, Clone, PartialEq)]
pub struct ReservationSpec {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub count: u32,
    /// `default` or `capacity-block`.
    pub capacity_block: bool,
    /// `open` or `targeted`.
    pub instance_match_criteria: String,
    pub tags: std::collections::BTreeMap<String, String>,
    /// Its owner (none: the simulated account's); not written in scenario
    /// files, a forecast takes it from the node class's status.
    pub owner_id: Option<String>,
    pub from: Duration,
    pub until: Option<Duration>,
}

/// The most instances one simulated reservation holds.
pub const MAX_RESERVATION_COUNT: u64 = 10_000;

/// A `cloud.launchErrors` entry: every launch fails with `error` from
/// `from` until `until` (offsets from the start).
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchErrorWindow {
    pub error: String,
    pub from: Duration,
    pub until: Option<Duration>,
}

/// One step of the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Offset from the start at which the step runs.
    pub at: Duration,
    pub pos: Pos,
    pub action: Action,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create or replace objects: Pods, Deployments (expanded into replicas),
    /// Jobs, DaemonSets, PodDisruptionBudgets and the other snapshot kinds.
    Apply(Vec<Manifest>),
    /// Set a Deployment's replicas.
    Scale {
        namespace: String,
        name: String,
        replicas: u32,
    },
    /// Delete objects of a kind by name or label selector.
    Delete {
        kind: String,
        namespace: Option<String>,
        name: Option<String>,
        selector: Option<String>,
    },
    /// Let time pass; the step's time is the end of the wait.
    Advance(Duration),
    /// A commit to the configuration repository, applied by git-driven sync.
    Commit(CommitStep),
    /// A new release of an AMI family is published: `family@latest`
    /// resolves to it from now on.
    PublishImage { family: String, release: String },
    /// The cluster's Kubernetes version is upgraded: AMI aliases resolve to
    /// the new version's images.
    UpgradeKubernetes { version: String },
    /// dovetail's controller is stopped and started again: everything it
    /// holds only in memory is lost; the cluster and the cloud remain.
    Restart,
    /// EC2 or AWS Health sends an event about instances: the simulated EC2
    /// delivers it to the controller as EventBridge JSON.
    Interrupt(InterruptStep),
    /// The simulated kubelet (or the EKS node monitoring agent) reports a
    /// node condition: nodes can be broken, for node repair.
    NodeCondition(NodeConditionStep),
}

/// The `nodeCondition` step: a condition the kubelet sets on nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConditionStep {
    /// `Node(name)` or `Selector(label=value,...)`.
    pub target: InterruptTarget,
    /// With a selector: the first `count` matching nodes by name.
    pub count: Option<usize>,
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

/// The `interrupt` step: which event, about which instances.
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptStep {
    pub kind: crate::interruption::Kind,
    pub target: InterruptTarget,
    /// With a selector: the first `count` matching nodes by name.
    pub count: Option<usize>,
    /// For `state-change`: the state the instance enters.
    pub state: Option<crate::interruption::InstanceState>,
}

/// The instances an `interrupt` step is about.
#[derive(Debug, Clone, PartialEq)]
pub enum InterruptTarget {
    /// The instance behind a node, by the node's name.
    Node(String),
    /// An instance by id.
    Instance(String),
    /// Every node matching an equality-based label selector.
    Selector(String),
}

/// The `commit` step: files written or deleted in the configuration
/// repository, committed at the step's virtual time, then synced.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitStep {
    pub message: String,
    /// The files written or deleted, in the scenario's order.
    pub files: Vec<CommitFile>,
    /// Prune managed objects no longer in the repository.
    pub prune: bool,
    /// The scenario file, for messages.
    pub scenario: String,
}

/// One file of a `commit` step.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitFile {
    /// Repository-relative path with `/` separators.
    pub path: String,
    /// The new content; `None` deletes the file.
    pub content: Option<Vec<u8>>,
    /// Where the path is written in the scenario.
    pub pos: Pos,
}

const STEP_KINDS: [&str; 10] = [
    "apply",
    "scale",
    "delete",
    "commit",
    "interrupt",
    "nodeCondition",
    "advance",
    "publishImage",
    "upgradeKubernetes",
    "restart",
];

/// A problem in a scenario: always a diagnostic with file and position.
pub type ScenarioError = Box<Diagnostic>;

struct Ctx<'a> {
    file: &'a str,
    dir: &'a Path,
}

impl Ctx<'_> {
    fn err(&self, node: &Node, message: impl Into<String>) -> ScenarioError {
        self.err_at(node.pos, message)
    }

    fn err_at(&self, pos: Pos, message: impl Into<String>) -> ScenarioError {
        Box::new(
            Diagnostic::error("scenario", message)
                .in_file(self.file)
                .at(pos),
        )
    }

    fn str<'n>(&self, node: &'n Node, what: &str) -> Result<&'n str, ScenarioError> {
        node.as_str()
            .ok_or_else(|| self.err(node, format!("{what} must be a string")))
    }

    fn duration(&self, node: &Node, what: &str) -> Result<Duration, ScenarioError> {
        let s = match &node.value {
            Value::Str(s) => s.as_str(),
            _ => {
                return Err(self.err(
                    node,
                    format!("{what} must be a duration such as 90s, 10m or 1h30m"),
                ));
            }
        };
        match parse_duration(s, DurationSyntax::Hms) {
            Ok(NillableDuration::After(d)) => Ok(d),
            Ok(NillableDuration::Never) => Err(self.err(node, format!("{what} cannot be Never"))),
            Err(e) => Err(self.err(node, format!("{what}: {e}"))),
        }
    }

    /// A point of the timeline must stay within [`MAX_DURATION`] of the start.
    fn within_limit(&self, node: &Node, what: &str, t: Duration) -> Result<(), ScenarioError> {
        if t > MAX_DURATION {
            return Err(self.err(
                node,
                format!(
                    "{what} reaches {} after the start, beyond the simulation's limit of {} (31 days)",
                    human(t),
                    human(MAX_DURATION)
                ),
            ));
        }
        Ok(())
    }

    fn path(&self, node: &Node, what: &str) -> Result<PathBuf, ScenarioError> {
        Ok(self.dir.join(self.str(node, what)?))
    }
}

fn entries(node: &Node) -> &[(yaml::Key, Node)] {
    match &node.value {
        Value::Map(m) => m,
        _ => &[],
    }
}

fn check_keys(ctx: &Ctx, node: &Node, allowed: &[&str], what: &str) -> Result<(), ScenarioError> {
    if !matches!(node.value, Value::Map(_)) {
        return Err(ctx.err(node, format!("{what} must be a mapping")));
    }
    for (k, _) in entries(node) {
        if !allowed.contains(&k.name.as_str()) {
            return Err(ctx.err_at(
                k.pos,
                format!(
                    "unknown field `{}` in {what}; expected one of {}",
                    k.name,
                    allowed.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// A scenario's `region` and `zones` (default: the region's a, b and c).
fn region_and_zones(ctx: &Ctx, root: &Node) -> Result<(String, Vec<String>), ScenarioError> {
    let region = match root.get("region") {
        Some(n) => ctx.str(n, "region")?.to_string(),
        None => DEFAULT_REGION.to_string(),
    };
    let zones = match root.get("zones") {
        Some(n) => match &n.value {
            Value::Seq(items) if !items.is_empty() => items
                .iter()
                .map(|z| ctx.str(z, "a zone").map(str::to_string))
                .collect::<Result<_, _>>()?,
            _ => return Err(ctx.err(n, "zones must be a non-empty list of zone names")),
        },
        None => default_zones(&region),
    };
    Ok((region, zones))
}

/// The simulated cloud of a scenario file alone: its `region`, `zones` and
/// `cloud` (what `controller --cloud kwok --cloud-scenario` reads; any
/// other key of a scenario is allowed and ignored, so a scenario file can
/// be given as it is).
pub fn load_cloud(path: &Path) -> Result<(String, Vec<String>, CloudSettings), ScenarioError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| {
        Box::new(
            Diagnostic::error("scenario", format!("cannot read the scenario: {e}")).in_file(&file),
        )
    })?;
    let parsed = yaml::parse_documents(&file, &bytes, &Limits::default());
    if let Some(d) = parsed.diagnostics.into_iter().next() {
        return Err(Box::new(d));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let ctx = Ctx { file: &file, dir };
    let docs: Vec<&yaml::YamlDoc> = parsed
        .docs
        .iter()
        .filter(|d| !matches!(d.root.value, Value::Null))
        .collect();
    let root = match docs.as_slice() {
        [doc] => &doc.root,
        [] => {
            return Ok((
                DEFAULT_REGION.to_string(),
                default_zones(DEFAULT_REGION),
                CloudSettings::default(),
            ));
        }
        [_, second, ..] => {
            return Err(ctx.err(&second.root, "a scenario is a single YAML document"));
        }
    };
    check_keys(&ctx, root, &SCENARIO_KEYS, "the scenario")?;
    let (region, zones) = region_and_zones(&ctx, root)?;
    let cloud = match root.get("cloud") {
        Some(n) => cloud_settings(&ctx, n)?,
        None => CloudSettings::default(),
    };
    Ok((region, zones, cloud))
}

/// The keys of a scenario file.
const SCENARIO_KEYS: [&str; 12] = [
    "start", "config", "catalog", "region", "zones", "initial", "cloud", "pods", "settings",
    "timeline", "until", "faults",
];

/// Reads and checks a scenario file.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| {
        Box::new(
            Diagnostic::error("scenario", format!("cannot read the scenario: {e}")).in_file(&file),
        )
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let scenario = parse(&file, dir, &bytes)?;
    check_on_disk(&scenario)?;
    Ok(scenario)
}

/// Checks what a scenario names on disk before anything runs: the
/// configuration repository is a directory, and every `commit` step writes
/// only inside it, never through a symlink, and deletes only files that
/// exist at that step.
pub fn check_on_disk(s: &Scenario) -> Result<(), ScenarioError> {
    let err = |pos: Pos, message: String| -> ScenarioError {
        Box::new(
            Diagnostic::error("scenario", message)
                .in_file(&s.file)
                .at(pos),
        )
    };
    match std::fs::metadata(&s.config) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(err(
                s.config_pos,
                format!(
                    "config: {} is not a directory; it names the configuration repository",
                    s.config.display()
                ),
            ));
        }
        Err(e) => {
            let mut d = err(
                s.config_pos,
                format!(
                    "config: cannot read the configuration repository {}: {e}",
                    s.config.display()
                ),
            );
            d.hint = Some("`config` is relative to the scenario file".into());
            return Err(d);
        }
    }
    // Whether each path is a file at the current step, where a step changed it.
    let mut present: std::collections::HashMap<&str, bool> = std::collections::HashMap::new();
    for step in &s.steps {
        let Action::Commit(c) = &step.action else {
            continue;
        };
        for f in &c.files {
            let rel = Path::new(&f.path);
            if let Some(blocked) = crate::fsutil::blocked_inside(&s.config, rel) {
                let why = match blocked {
                    crate::fsutil::WriteError::Symlink { path } => format!(
                        "{} is a symlink, and a commit step never writes through a symlink",
                        path.strip_prefix(&s.config).unwrap_or(&path).display()
                    ),
                    crate::fsutil::WriteError::NotADirectory { path } => format!(
                        "{} is a file, not a directory",
                        path.strip_prefix(&s.config).unwrap_or(&path).display()
                    ),
                    other => other.to_string(),
                };
                return Err(err(f.pos, format!("commit: {:?}: {why}", f.path)));
            }
            let on_disk = std::fs::symlink_metadata(s.config.join(rel)).ok();
            if f.content.is_some() && on_disk.as_ref().is_some_and(|m| m.file_type().is_symlink()) {
                return Err(err(
                    f.pos,
                    format!(
                        "commit: {:?}: it is a symlink in the configuration repository, and a commit step never writes through a symlink",
                        f.path
                    ),
                ));
            }
            let exists = *present
                .entry(f.path.as_str())
                .or_insert_with(|| on_disk.is_some_and(|m| !m.is_dir()));
            if f.content.is_none() && !exists {
                return Err(err(
                    f.pos,
                    format!(
                        "commit: cannot delete {:?}: it is not in the configuration repository {} at this step",
                        f.path,
                        s.config.display()
                    ),
                ));
            }
            present.insert(f.path.as_str(), f.content.is_some());
        }
    }
    Ok(())
}

/// Parses a scenario held in memory; relative paths resolve against `dir`.
pub fn parse(file: &str, dir: &Path, bytes: &[u8]) -> Result<Scenario, ScenarioError> {
    let parsed = yaml::parse_documents(file, bytes, &Limits::default());
    if let Some(d) = parsed.diagnostics.into_iter().next() {
        return Err(Box::new(d));
    }
    let ctx = Ctx { file, dir };
    // Empty documents (a trailing `---`, or one with only comments) are
    // skipped, as kubectl does.
    let docs: Vec<&yaml::YamlDoc> = parsed
        .docs
        .iter()
        .filter(|d| !matches!(d.root.value, Value::Null))
        .collect();
    let root = match docs.as_slice() {
        [doc] => &doc.root,
        [] => {
            return Err(Box::new(
                Diagnostic::error("scenario", "the scenario is empty").in_file(file),
            ));
        }
        [_, second, ..] => {
            return Err(ctx.err(&second.root, "a scenario is a single YAML document"));
        }
    };
    check_keys(&ctx, root, &SCENARIO_KEYS, "the scenario")?;

    let start = match root.get("start") {
        Some(n) => parse_rfc3339(ctx.str(n, "start")?).map_err(|e| {
            ctx.err(
                n,
                format!("start must be an RFC 3339 time such as {DEFAULT_START}: {e}"),
            )
        })?,
        None => parse_rfc3339(DEFAULT_START).expect("valid default"),
    };
    let config_pos = root.get("config").map_or(root.pos, |n| n.pos);
    let config = match root.get("config") {
        Some(n) => ctx.path(n, "config")?,
        None => {
            return Err(ctx.err(
                root,
                "missing `config`: the configuration repository, relative to the scenario file",
            ));
        }
    };
    let catalog = root
        .get("catalog")
        .map(|n| ctx.path(n, "catalog"))
        .transpose()?;
    let (region, zones) = region_and_zones(&ctx, root)?;
    let zones_pos = root
        .get("zones")
        .or_else(|| root.get("region"))
        .map_or(root.pos, |n| n.pos);
    let initial = match root.get("initial") {
        Some(n) => manifests(&ctx, n, "initial")?,
        None => Vec::new(),
    };
    let cloud = match root.get("cloud") {
        Some(n) => cloud_settings(&ctx, n)?,
        None => CloudSettings::default(),
    };
    // A reservation outside the scenario's zones could never be used.
    if let Some(items) = root
        .get("cloud")
        .and_then(|c| c.get("reservations"))
        .and_then(|n| list(&ctx, n, "reservations").ok())
    {
        for (node, r) in items.iter().zip(&cloud.reservations) {
            if !zones.contains(&r.zone) {
                return Err(ctx.err(
                    node.get("zone").unwrap_or(node),
                    format!(
                        "zone {:?} is not one of the scenario's zones ({})",
                        r.zone,
                        zones.join(", ")
                    ),
                ));
            }
        }
    }
    let pods = match root.get("pods") {
        Some(n) => pod_settings(&ctx, n)?,
        None => PodSettings::default(),
    };
    let mut launch_concurrency = crate::controller::LAUNCH_CONCURRENCY;
    let mut preferences = crate::scheduling::Preferences::default();
    let feature_gates = match root.get("settings") {
        Some(n) => {
            check_keys(
                &ctx,
                n,
                &["featureGates", "launchConcurrency", "preferencePolicy"],
                "settings",
            )?;
            if let Some(p) = n.get("preferencePolicy") {
                preferences = match ctx.str(p, "preferencePolicy")? {
                    "Respect" => crate::scheduling::Preferences::Respect,
                    "Ignore" => crate::scheduling::Preferences::Ignore,
                    other => {
                        return Err(ctx.err(
                            p,
                            format!("preferencePolicy must be Respect or Ignore, not {other:?}"),
                        ));
                    }
                };
            }
            if let Some(c) = n.get("launchConcurrency") {
                launch_concurrency = match &c.value {
                    Value::Number(n) if n.as_u64().is_some_and(|i| i >= 1) => {
                        usize::try_from(n.as_u64().unwrap_or(1)).unwrap_or(usize::MAX)
                    }
                    _ => {
                        return Err(
                            ctx.err(c, "launchConcurrency must be a whole number of at least 1")
                        );
                    }
                };
            }
            match n.get("featureGates") {
                Some(g) => {
                    crate::controller::features::FeatureGates::parse(ctx.str(g, "featureGates")?)
                        .map_err(|e| ctx.err(g, e))?
                }
                None => Default::default(),
            }
        }
        None => Default::default(),
    };
    let steps = match root.get("timeline") {
        Some(n) => timeline(&ctx, n)?,
        None => Vec::new(),
    };
    let faults = match root.get("faults") {
        Some(n) => faults(&ctx, n)?,
        None => Vec::new(),
    };
    check_pod_total(&ctx, &steps)?;
    let last = steps.last().map(|s| s.at).unwrap_or_default();
    let until = match root.get("until") {
        Some(n) => {
            let until = ctx.duration(n, "until")?;
            ctx.within_limit(n, "until", until)?;
            if until < last {
                return Err(ctx.err(
                    n,
                    format!(
                        "until ({}) is before the last step ({})",
                        human(until),
                        human(last)
                    ),
                ));
            }
            until
        }
        None => last + DEFAULT_TAIL,
    };
    Ok(Scenario {
        file: file.to_string(),
        start,
        config,
        config_pos,
        catalog,
        region,
        zones,
        zones_pos,
        initial: initial.into(),
        cloud,
        pods,
        feature_gates,
        launch_concurrency,
        preferences,
        steps,
        until,
        faults,
    })
}

/// A map of string tags (`tags:`), empty when unset.
fn tags(
    ctx: &Ctx,
    node: &Node,
) -> Result<std::collections::BTreeMap<String, String>, ScenarioError> {
    let Some(t) = node.get("tags") else {
        return Ok(Default::default());
    };
    if !matches!(t.value, Value::Map(_)) {
        return Err(ctx.err(t, "tags must be a mapping of strings"));
    }
    entries(t)
        .iter()
        .map(|(k, v)| Ok((k.name.clone(), ctx.str(v, "a tag value")?.to_string())))
        .collect()
}

/// A required string field of a mapping.
fn required(ctx: &Ctx, node: &Node, key: &str, what: &str) -> Result<String, ScenarioError> {
    node.get(key)
        .ok_or_else(|| ctx.err(node, format!("{what} needs `{key}`")))
        .and_then(|n| ctx.str(n, key))
        .map(str::to_string)
}

fn list<'n>(ctx: &Ctx, node: &'n Node, what: &str) -> Result<&'n [Node], ScenarioError> {
    match &node.value {
        Value::Seq(items) => Ok(items),
        _ => Err(ctx.err(node, format!("{what} must be a list"))),
    }
}

fn pod_settings(ctx: &Ctx, node: &Node) -> Result<PodSettings, ScenarioError> {
    check_keys(ctx, node, &["terminationGracePeriod"], "pods")?;
    let mut p = PodSettings::default();
    if let Some(n) = node.get("terminationGracePeriod") {
        // Durations here are whole hours, minutes and seconds, as the
        // pod's terminationGracePeriodSeconds is whole seconds.
        p.termination_grace_period = ctx.duration(n, "terminationGracePeriod")?;
    }
    Ok(p)
}

fn cloud_settings(ctx: &Ctx, node: &Node) -> Result<CloudSettings, ScenarioError> {
    check_keys(
        ctx,
        node,
        &[
            "launchDelay",
            "volumeAttachDelay",
            "volumeDetachDelay",
            "insufficientCapacity",
            "launchErrors",
            "apiLatency",
            "kubernetesVersion",
            "images",
            "subnets",
            "securityGroups",
            "reservations",
            "placementGroups",
        ],
        "cloud",
    )?;
    let mut c = CloudSettings::default();
    if let Some(n) = node.get("kubernetesVersion") {
        c.kubernetes_version = kubernetes_version(ctx, n)?;
    }
    if let Some(n) = node.get("images") {
        for i in list(ctx, n, "images")? {
            check_keys(ctx, i, &["id", "name", "arch", "tags"], "an image")?;
            let arch = i
                .get("arch")
                .map(|a| ctx.str(a, "arch").map(str::to_string))
                .transpose()?
                .unwrap_or_else(|| "amd64".into());
            if !["amd64", "arm64"].contains(&arch.as_str()) {
                return Err(ctx.err(i, format!("arch {arch:?} is not amd64 or arm64")));
            }
            c.images.push(SimImage {
                id: required(ctx, i, "id", "an image")?,
                name: i
                    .get("name")
                    .map(|n| ctx.str(n, "name").map(str::to_string))
                    .transpose()?
                    .unwrap_or_default(),
                arch,
                tags: tags(ctx, i)?,
            });
        }
    }
    if let Some(n) = node.get("subnets") {
        let mut subnets = Vec::new();
        for sn in list(ctx, n, "subnets")? {
            check_keys(ctx, sn, &["id", "zone", "tags"], "a subnet")?;
            subnets.push(SimSubnet {
                id: required(ctx, sn, "id", "a subnet")?,
                zone: required(ctx, sn, "zone", "a subnet")?,
                tags: tags(ctx, sn)?,
            });
        }
        c.subnets = Some(subnets);
    }
    if let Some(n) = node.get("securityGroups") {
        let mut groups = Vec::new();
        for g in list(ctx, n, "securityGroups")? {
            check_keys(ctx, g, &["id", "name", "tags"], "a security group")?;
            groups.push(SimSecurityGroup {
                id: required(ctx, g, "id", "a security group")?,
                name: g
                    .get("name")
                    .map(|n| ctx.str(n, "name").map(str::to_string))
                    .transpose()?
                    .unwrap_or_default(),
                tags: tags(ctx, g)?,
            });
        }
        c.security_groups = Some(groups);
    }
    if let Some(n) = node.get("reservations") {
        for r in list(ctx, n, "reservations")? {
            c.reservations.push(reservation(ctx, r)?);
        }
        let mut ids = std::collections::BTreeSet::new();
        for (r, spec) in list(ctx, n, "reservations")?.iter().zip(&c.reservations) {
            if !ids.insert(spec.id.as_str()) {
                return Err(ctx.err(r, format!("reservation {} is listed twice", spec.id)));
            }
        }
    }
    if let Some(n) = node.get("placementGroups") {
        for g in list(ctx, n, "placementGroups")? {
            let group = placement_group(ctx, g)?;
            if c.placement_groups
                .iter()
                .any(|o| o.name == group.name || o.id == group.id)
            {
                return Err(ctx.err(
                    g,
                    format!(
                        "placement group {} ({}) is listed twice",
                        group.name, group.id
                    ),
                ));
            }
            c.placement_groups.push(group);
        }
    }
    if let Some(n) = node.get("launchDelay") {
        c.launch_delay = ctx.duration(n, "launchDelay")?;
    }
    if let Some(n) = node.get("apiLatency") {
        c.api_latency = ctx.duration(n, "apiLatency")?;
    }
    if let Some(n) = node.get("volumeAttachDelay") {
        c.volume_attach_delay = ctx.duration(n, "volumeAttachDelay")?;
    }
    if let Some(n) = node.get("volumeDetachDelay") {
        c.volume_detach_delay = ctx.duration(n, "volumeDetachDelay")?;
    }
    if let Some(n) = node.get("insufficientCapacity") {
        let Value::Seq(items) = &n.value else {
            return Err(ctx.err(n, "insufficientCapacity must be a list of windows"));
        };
        for w in items {
            check_keys(
                ctx,
                w,
                &["instanceType", "zone", "capacityType", "from", "until"],
                "an insufficientCapacity window",
            )?;
            let opt = |k: &str| -> Result<Option<String>, ScenarioError> {
                w.get(k)
                    .map(|n| ctx.str(n, k).map(str::to_string))
                    .transpose()
            };
            let (from, until) = window(ctx, w)?;
            let capacity_type = opt("capacityType")?;
            if let Some(ct) = &capacity_type
                && !["on-demand", "spot", "reserved"].contains(&ct.as_str())
            {
                return Err(ctx.err(
                    w.get("capacityType").unwrap_or(w),
                    format!("capacityType {ct:?} is not one of on-demand, spot, reserved"),
                ));
            }
            c.insufficient_capacity.push(CapacityWindow {
                instance_type: opt("instanceType")?,
                zone: opt("zone")?,
                capacity_type,
                from,
                until,
            });
        }
    }
    if let Some(n) = node.get("launchErrors") {
        let Value::Seq(items) = &n.value else {
            return Err(ctx.err(n, "launchErrors must be a list of windows"));
        };
        for w in items {
            check_keys(ctx, w, &["error", "from", "until"], "a launchErrors window")?;
            let Some(e) = w.get("error") else {
                return Err(ctx.err(w, "a launchErrors window needs an error"));
            };
            let error = ctx.str(e, "error")?.to_string();
            let known = crate::world::ec2::LaunchErrorWindow::ERRORS;
            if !known.contains(&error.as_str()) {
                return Err(ctx.err(
                    e,
                    format!("error {error:?} is not one of {}", known.join(", ")),
                ));
            }
            let (from, until) = window(ctx, w)?;
            c.launch_errors
                .push(LaunchErrorWindow { error, from, until });
        }
    }
    Ok(c)
}

/// A `cloud.reservations` entry.
/// A `cloud.placementGroups` entry: `name`, `strategy` (`cluster`,
/// `partition` or `spread`), `partitions` (1 to 7) for a partition group
/// only, `spreadLevel` (`rack` or `host`) for a spread group only, and an
/// optional `id` (default: `pg-` and a hash of the name).
fn placement_group(
    ctx: &Ctx,
    g: &Node,
) -> Result<crate::cloud::aws::placement::PlacementGroup, ScenarioError> {
    const WHAT: &str = "a placement group";
    check_keys(
        ctx,
        g,
        &["name", "id", "strategy", "partitions", "spreadLevel"],
        WHAT,
    )?;
    let name = required(ctx, g, "name", WHAT)?;
    let strategy = required(ctx, g, "strategy", WHAT)?;
    if !["cluster", "partition", "spread"].contains(&strategy.as_str()) {
        return Err(ctx.err(
            g.get("strategy").unwrap_or(g),
            format!("strategy {strategy:?} is not one of cluster, partition, spread"),
        ));
    }
    let id = match g.get("id") {
        Some(n) => {
            let id = ctx.str(n, "id")?.to_string();
            let digits = id.strip_prefix("pg-").unwrap_or("");
            if digits.is_empty()
                || !digits
                    .chars()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
            {
                return Err(ctx.err(
                    n,
                    format!(
                        "id {id:?} is not a placement group id (pg- and lowercase letters or digits)"
                    ),
                ));
            }
            id
        }
        None => {
            use std::hash::Hasher;
            let mut h = fnv::FnvHasher::default();
            h.write(name.as_bytes());
            format!("pg-0{:016x}", h.finish())
        }
    };
    let partition_count = match (g.get("partitions"), strategy.as_str()) {
        (Some(n), "partition") => match &n.value {
            Value::Number(v) => v
                .as_u64()
                .filter(|v| (1..=7).contains(v))
                .and_then(|v| i32::try_from(v).ok()),
            _ => None,
        }
        .ok_or_else(|| ctx.err(n, "partitions must be an integer from 1 to 7"))?,
        (None, "partition") => return Err(ctx.err(g, "a partition group needs `partitions`")),
        (Some(n), _) => {
            return Err(ctx.err(n, "only a partition group has `partitions`"));
        }
        (None, _) => 0,
    };
    let spread_level = match (g.get("spreadLevel"), strategy.as_str()) {
        (Some(n), "spread") => {
            let level = ctx.str(n, "spreadLevel")?.to_string();
            if !["rack", "host"].contains(&level.as_str()) {
                return Err(ctx.err(n, format!("spreadLevel {level:?} is not one of rack, host")));
            }
            Some(level)
        }
        (Some(n), _) => return Err(ctx.err(n, "only a spread group has `spreadLevel`")),
        (None, "spread") => Some("rack".to_string()),
        (None, _) => None,
    };
    Ok(crate::cloud::aws::placement::PlacementGroup {
        id,
        name,
        strategy,
        partition_count,
        spread_level,
    })
}

fn reservation(ctx: &Ctx, r: &Node) -> Result<ReservationSpec, ScenarioError> {
    const WHAT: &str = "a reservation";
    check_keys(
        ctx,
        r,
        &[
            "id",
            "instanceType",
            "zone",
            "count",
            "type",
            "instanceMatchCriteria",
            "tags",
            "from",
            "until",
        ],
        WHAT,
    )?;
    let id = required(ctx, r, "id", WHAT)?;
    if !id.starts_with("cr-")
        || id.len() < 4
        || !id[3..]
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
    {
        return Err(ctx.err(
            r.get("id").unwrap_or(r),
            format!(
                "id {id:?} is not a capacity reservation id (cr- and lowercase letters or digits)"
            ),
        ));
    }
    let count_node = r
        .get("count")
        .ok_or_else(|| ctx.err(r, "a reservation needs `count`"))?;
    let count = match &count_node.value {
        Value::Number(n) => n
            .as_u64()
            .filter(|n| (1..=MAX_RESERVATION_COUNT).contains(n))
            .and_then(|n| u32::try_from(n).ok()),
        _ => None,
    }
    .ok_or_else(|| {
        ctx.err(
            count_node,
            format!("count must be an integer from 1 to {MAX_RESERVATION_COUNT}"),
        )
    })?;
    let opt = |k: &str| -> Result<Option<(String, &Node)>, ScenarioError> {
        r.get(k)
            .map(|n| ctx.str(n, k).map(|s| (s.to_string(), n)))
            .transpose()
    };
    let capacity_block = match opt("type")? {
        None => false,
        Some((t, _)) if t == "default" => false,
        Some((t, _)) if t == "capacity-block" => true,
        Some((t, n)) => {
            return Err(ctx.err(
                n,
                format!("type {t:?} is not one of default, capacity-block"),
            ));
        }
    };
    let instance_match_criteria = match opt("instanceMatchCriteria")? {
        None => "targeted".to_string(),
        Some((c, _)) if c == "open" || c == "targeted" => c,
        Some((c, n)) => {
            return Err(ctx.err(
                n,
                format!("instanceMatchCriteria {c:?} is not one of open, targeted"),
            ));
        }
    };
    let (from, until) = window(ctx, r)?;
    Ok(ReservationSpec {
        id,
        instance_type: required(ctx, r, "instanceType", WHAT)?,
        zone: required(ctx, r, "zone", WHAT)?,
        count,
        capacity_block,
        instance_match_criteria,
        tags: tags(ctx, r)?,
        owner_id: None,
        from,
        until,
    })
}

/// A window's `from` (default the start) and optional `until`, offsets
/// from the start; an error when it ends before it starts.
fn window(ctx: &Ctx, w: &Node) -> Result<(Duration, Option<Duration>), ScenarioError> {
    let from = match w.get("from") {
        Some(n) => ctx.duration(n, "from")?,
        None => Duration::ZERO,
    };
    let until = w
        .get("until")
        .map(|n| ctx.duration(n, "until"))
        .transpose()?;
    if until.is_some_and(|u| u <= from) {
        return Err(ctx.err(w, "the window ends before it starts"));
    }
    Ok((from, until))
}

/// A Kubernetes minor version such as `"1.34"`.
fn kubernetes_version(ctx: &Ctx, node: &Node) -> Result<String, ScenarioError> {
    // A number would lose its trailing zero (1.30 is 1.3): only strings.
    let v = match &node.value {
        Value::Str(s) => s.clone(),
        _ => {
            return Err(ctx.err(
                node,
                "a Kubernetes version is a string such as \"1.34\" (quote it in YAML)",
            ));
        }
    };
    let valid = v
        .split_once('.')
        .is_some_and(|(a, b)| a.parse::<u16>().is_ok() && b.parse::<u16>().is_ok());
    if !valid {
        return Err(ctx.err(
            node,
            format!("{v:?} is not a Kubernetes version such as \"1.34\" (quote it in YAML)"),
        ));
    }
    Ok(v)
}

/// Objects given inline (a list, or one object) or as `{file: path}`.
fn manifests(ctx: &Ctx, node: &Node, what: &str) -> Result<Vec<Manifest>, ScenarioError> {
    if let Some(f) = node.get("file") {
        check_keys(ctx, node, &["file"], what)?;
        let path = ctx.path(f, "file")?;
        let (shown, text) =
            crate::snapshot::read_text(&path).map_err(|e| ctx.err(f, e.to_string()))?;
        let items = crate::snapshot::items(&shown, &text).map_err(|e| Box::new(e.diagnostic()))?;
        return items
            .into_iter()
            .map(|it| {
                let object = it.value(&shown).map_err(|e| Box::new(e.diagnostic()))?;
                check_manifest(&shown, &object, |p| it.locate(p))?;
                Ok(Manifest {
                    object,
                    file: shown.clone(),
                    pos: it.pos,
                })
            })
            .collect();
    }
    let items: Vec<&Node> = match &node.value {
        Value::Seq(items) => items.iter().collect(),
        Value::Map(_) => vec![node],
        _ => {
            return Err(ctx.err(
                node,
                format!("{what} must be a list of Kubernetes objects or {{file: path}}"),
            ));
        }
    };
    items
        .into_iter()
        .map(|n| {
            let object = n.to_json();
            if object.get("kind").and_then(Json::as_str).is_none()
                || object.get("apiVersion").and_then(Json::as_str).is_none()
            {
                return Err(ctx.err(n, "a manifest needs apiVersion and kind"));
            }
            check_manifest(ctx.file, &object, |p| n.locate_value(p))?;
            Ok(Manifest {
                object,
                file: ctx.file.to_string(),
                pos: n.pos,
            })
        })
        .collect()
}

/// The most replicas (or Job completions, or parallelism) of one workload.
pub const MAX_REPLICAS: i64 = 100_000;
/// The most pods all the workloads of a scenario may ask for together (each
/// workload counted at the most it reaches): the simulation keeps every pod
/// in memory.
pub const MAX_PODS: i64 = 200_000;
/// The longest simulated run: 31 days of cluster time.
pub const MAX_DURATION: Duration = Duration::from_secs(31 * 24 * 3600);

/// The pods a workload manifest asks for, and the fields that say so.
fn workload_pods(object: &Json) -> Option<(&'static str, Vec<&'static str>)> {
    let kind = object.get("kind").and_then(Json::as_str)?;
    match kind {
        "Deployment" | "ReplicaSet" | "StatefulSet" => {
            Some(("spec.template.spec", vec!["replicas"]))
        }
        "Job" => Some(("spec.template.spec", vec!["completions", "parallelism"])),
        "DaemonSet" => Some(("spec.template.spec", vec![])),
        "Pod" => Some(("spec", vec![])),
        _ => None,
    }
}

/// Checks a manifest before the simulation runs: the counts of a workload
/// are integers within [`MAX_REPLICAS`], and its pod template's resource
/// quantities are valid and not negative. `locate` finds a field's line.
fn check_manifest(
    file: &str,
    object: &Json,
    locate: impl Fn(&JsonPath) -> Pos,
) -> Result<(), ScenarioError> {
    let Some((template, counts)) = workload_pods(object) else {
        return Ok(());
    };
    let err = |path: JsonPath, message: String| -> ScenarioError {
        Box::new(
            Diagnostic::error("scenario", message)
                .in_file(file)
                .at(locate(&path))
                .with_object(crate::diag::kind_name(object))
                .with_path(path),
        )
    };
    for field in counts {
        let path = JsonPath::root().key("spec").key(field);
        let Some(v) = object.get("spec").and_then(|s| s.get(field)) else {
            continue;
        };
        match v.as_i64() {
            Some(n) if (0..=MAX_REPLICAS).contains(&n) => {}
            Some(n) if n > MAX_REPLICAS => {
                return Err(err(
                    path,
                    format!(
                        "{n} is more than the simulation's limit of {MAX_REPLICAS} pods per workload"
                    ),
                ));
            }
            _ => {
                return Err(err(
                    path,
                    format!("{field} must be an integer from 0 to {MAX_REPLICAS}, not {v}"),
                ));
            }
        }
    }
    let at = JsonPath::parse(template);
    let Some(spec) = at.0.iter().try_fold(object, |v, seg| match seg {
        crate::diag::Seg::Key(k) => v.get(k),
        crate::diag::Seg::Index(i) => v.get(i),
    }) else {
        return Ok(());
    };
    // A template that does not deserialise is reported when it is applied.
    let Ok(spec) = serde_json::from_value::<k8s_openapi::api::core::v1::PodSpec>(spec.clone())
    else {
        return Ok(());
    };
    if let Some((path, message)) = crate::scheduling::pod::resource_problems(&(&spec).into())
        .into_iter()
        .next()
    {
        let mut full = at.clone();
        full.0.extend(path.0);
        return Err(err(full, message));
    }
    Ok(())
}

/// The most pods each workload reaches over the timeline, against
/// [`MAX_PODS`]; an error names the step that goes over.
fn check_pod_total(ctx: &Ctx, steps: &[Step]) -> Result<(), ScenarioError> {
    let mut most: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    for step in steps {
        match &step.action {
            Action::Apply(ms) => {
                for m in ms {
                    let spec = m.object.get("spec");
                    let n = match m.kind() {
                        "Pod" => 1,
                        "Deployment" | "ReplicaSet" | "StatefulSet" => spec
                            .and_then(|s| s.get("replicas"))
                            .and_then(Json::as_i64)
                            .unwrap_or(1),
                        "Job" => {
                            let get = |f: &str| spec.and_then(|s| s.get(f)).and_then(Json::as_i64);
                            get("completions").or(get("parallelism")).unwrap_or(1)
                        }
                        _ => continue,
                    };
                    let key = format!(
                        "{}/{}/{}",
                        m.kind(),
                        m.object
                            .pointer("/metadata/namespace")
                            .and_then(Json::as_str)
                            .unwrap_or("default"),
                        m.object
                            .pointer("/metadata/name")
                            .and_then(Json::as_str)
                            .unwrap_or("")
                    );
                    let e = most.entry(key).or_default();
                    *e = (*e).max(n);
                }
            }
            Action::Scale {
                namespace,
                name,
                replicas,
            } => {
                let e = most
                    .entry(format!("Deployment/{namespace}/{name}"))
                    .or_default();
                *e = (*e).max(i64::from(*replicas));
            }
            _ => continue,
        }
        let total: i64 = most.values().sum();
        if total > MAX_PODS {
            return Err(ctx.err_at(
                step.pos,
                format!(
                    "the workloads reach {total} pods by this step, more than the simulation's limit of {MAX_PODS}"
                ),
            ));
        }
    }
    Ok(())
}

fn timeline(ctx: &Ctx, node: &Node) -> Result<Vec<Step>, ScenarioError> {
    let Value::Seq(items) = &node.value else {
        return Err(ctx.err(node, "timeline must be a list of steps"));
    };
    let mut steps = Vec::with_capacity(items.len());
    let mut now = Duration::ZERO;
    for item in items {
        if !matches!(item.value, Value::Map(_)) {
            return Err(ctx.err(
                item,
                "a step must be a mapping such as `{at: 5m, apply: [...]}`",
            ));
        }
        let actions: Vec<&(yaml::Key, Node)> = entries(item)
            .iter()
            .filter(|(k, _)| k.name != "at")
            .collect();
        let (key, body) = match actions.as_slice() {
            [one] => (&one.0, &one.1),
            [] => {
                return Err(ctx.err(
                    item,
                    format!(
                        "the step has no action; expected one of {}",
                        STEP_KINDS.join(", ")
                    ),
                ));
            }
            [_, second, ..] => {
                return Err(ctx.err_at(
                    second.0.pos,
                    "a step has exactly one action; split it into two steps",
                ));
            }
        };
        if let Some(at) = item.get("at") {
            let t = ctx.duration(at, "at")?;
            ctx.within_limit(at, "at", t)?;
            if t < now {
                return Err(ctx.err(
                    at,
                    format!(
                        "time goes backwards: this step is at {} but the previous one is at {}",
                        human(t),
                        human(now)
                    ),
                ));
            }
            now = t;
        }
        let action = match key.name.as_str() {
            "apply" => Action::Apply(manifests(ctx, body, "apply")?),
            "scale" => {
                check_keys(ctx, body, &["deployment", "namespace", "replicas"], "scale")?;
                let name = body
                    .get("deployment")
                    .ok_or_else(|| ctx.err(body, "scale needs `deployment`"))
                    .and_then(|n| ctx.str(n, "deployment"))?
                    .to_string();
                let namespace = body
                    .get("namespace")
                    .map(|n| ctx.str(n, "namespace").map(str::to_string))
                    .transpose()?
                    .unwrap_or_else(|| "default".into());
                let r = body
                    .get("replicas")
                    .ok_or_else(|| ctx.err(body, "scale needs `replicas`"))?;
                let replicas = match &r.value {
                    Value::Number(n) => n
                        .as_u64()
                        .filter(|n| i64::try_from(*n).is_ok_and(|n| n <= MAX_REPLICAS))
                        .and_then(|n| u32::try_from(n).ok()),
                    _ => None,
                }
                .ok_or_else(|| {
                    ctx.err(
                        r,
                        format!("replicas must be an integer from 0 to {MAX_REPLICAS} (the simulation's limit per workload)"),
                    )
                })?;
                Action::Scale {
                    namespace,
                    name,
                    replicas,
                }
            }
            "delete" => {
                check_keys(
                    ctx,
                    body,
                    &["kind", "namespace", "name", "selector"],
                    "delete",
                )?;
                let opt = |k: &str| -> Result<Option<String>, ScenarioError> {
                    body.get(k)
                        .map(|n| ctx.str(n, k).map(str::to_string))
                        .transpose()
                };
                let kind = opt("kind")?.ok_or_else(|| ctx.err(body, "delete needs `kind`"))?;
                let (name, selector) = (opt("name")?, opt("selector")?);
                if name.is_none() && selector.is_none() {
                    return Err(ctx.err(body, "delete needs `name` or `selector` (use selector: \"\" to delete every object of the kind)"));
                }
                Action::Delete {
                    kind,
                    namespace: opt("namespace")?,
                    name,
                    selector,
                }
            }
            "advance" => {
                let d = ctx.duration(body, "advance")?;
                now = now.saturating_add(d);
                ctx.within_limit(body, "advance", now)?;
                Action::Advance(d)
            }
            "commit" => Action::Commit(commit_step(ctx, body)?),
            "publishImage" => {
                check_keys(ctx, body, &["family", "release"], "publishImage")?;
                let family = required(ctx, body, "family", "publishImage")?;
                if !FAMILIES.contains(&family.as_str()) {
                    return Err(ctx.err(
                        body.get("family").unwrap_or(body),
                        format!(
                            "unknown AMI family {family:?}; expected one of {}",
                            FAMILIES.join(", ")
                        ),
                    ));
                }
                let release = match body.get("release") {
                    Some(r) => ctx.str(r, "release")?.to_string(),
                    None => String::new(),
                };
                Action::PublishImage { family, release }
            }
            "upgradeKubernetes" => {
                check_keys(ctx, body, &["version"], "upgradeKubernetes")?;
                let v = body
                    .get("version")
                    .ok_or_else(|| ctx.err(body, "upgradeKubernetes needs `version`"))?;
                Action::UpgradeKubernetes {
                    version: kubernetes_version(ctx, v)?,
                }
            }
            "restart" => {
                if ctx.str(body, "restart")? != "controller" {
                    return Err(ctx.err(body, "restart takes `controller`"));
                }
                Action::Restart
            }
            "interrupt" => Action::Interrupt(interrupt_step(ctx, body)?),
            "nodeCondition" => Action::NodeCondition(node_condition_step(ctx, body)?),
            other => {
                return Err(ctx.err_at(
                    key.pos,
                    format!(
                        "unknown step `{other}`; expected one of {}",
                        STEP_KINDS.join(", ")
                    ),
                ));
            }
        };
        steps.push(Step {
            at: now,
            pos: item.pos,
            action,
        });
    }
    Ok(steps)
}

/// The states a `state-change` step may name: those in which EC2 takes the
/// instance away.
const LEAVING_STATES: [&str; 4] = ["stopping", "stopped", "shutting-down", "terminated"];
/// The largest `count` of an `interrupt` step.
const MAX_INTERRUPT_COUNT: u64 = 100_000;

fn interrupt_step(ctx: &Ctx, body: &Node) -> Result<InterruptStep, ScenarioError> {
    use crate::interruption::{InstanceState, Kind};
    check_keys(
        ctx,
        body,
        &["kind", "node", "instance", "selector", "count", "state"],
        "interrupt",
    )?;
    let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
    let kind_node = body.get("kind").ok_or_else(|| {
        ctx.err(
            body,
            format!("interrupt needs `kind`: one of {}", kinds.join(", ")),
        )
    })?;
    let kind_name = ctx.str(kind_node, "kind")?;
    let kind = Kind::ALL
        .into_iter()
        .find(|k| k.as_str() == kind_name)
        .ok_or_else(|| {
            ctx.err(
                kind_node,
                format!(
                    "unknown interruption kind {kind_name:?}; expected one of {}",
                    kinds.join(", ")
                ),
            )
        })?;
    let named: Vec<(&str, &Node)> = ["node", "instance", "selector"]
        .into_iter()
        .filter_map(|k| body.get(k).map(|n| (k, n)))
        .collect();
    let target = match named.as_slice() {
        [] => {
            return Err(ctx.err(
                body,
                "interrupt needs one of `node` (a node's name), `instance` (an instance id) or `selector` (label=value,...)",
            ));
        }
        [(field, n)] => {
            let value = ctx.str(n, field)?.to_string();
            match *field {
                "node" if value.is_empty() => {
                    return Err(ctx.err(n, "node must name a node"));
                }
                "node" => InterruptTarget::Node(value),
                "instance" if !crate::interruption::message::is_instance_id(&value) => {
                    return Err(ctx.err(
                        n,
                        format!("{value:?} is not an EC2 instance id such as i-0123456789abcdef0"),
                    ));
                }
                "instance" => InterruptTarget::Instance(value),
                _ => {
                    if let Err(e) = crate::cluster::Selector::parse(&value) {
                        return Err(ctx.err(n, format!("selector {value:?}: {e}")));
                    }
                    InterruptTarget::Selector(value)
                }
            }
        }
        [_, (second, n), ..] => {
            return Err(ctx.err(
                n,
                format!(
                    "interrupt names its instances one way: `{second}` cannot go with `{}`",
                    named[0].0
                ),
            ));
        }
    };
    let count = selector_count(ctx, body, &target)?;
    let state = match (kind, body.get("state")) {
        (Kind::StateChange, Some(n)) => {
            let s = ctx.str(n, "state")?;
            let state = InstanceState::parse(s)
                .filter(|st| st.is_leaving())
                .ok_or_else(|| {
                    ctx.err(
                        n,
                        format!(
                            "unknown state {s:?}; expected one of {}",
                            LEAVING_STATES.join(", ")
                        ),
                    )
                })?;
            Some(state)
        }
        (Kind::StateChange, None) => {
            return Err(ctx.err(
                body,
                format!(
                    "a state-change needs `state`: one of {}",
                    LEAVING_STATES.join(", ")
                ),
            ));
        }
        (_, Some(n)) => return Err(ctx.err(n, "state goes with kind: state-change")),
        (_, None) => None,
    };
    Ok(InterruptStep {
        kind,
        target,
        count,
        state,
    })
}

/// The `count` of a step that names nodes by `selector`: the first `count`
/// matching nodes by name.
fn selector_count(
    ctx: &Ctx,
    body: &Node,
    target: &InterruptTarget,
) -> Result<Option<usize>, ScenarioError> {
    let Some(n) = body.get("count") else {
        return Ok(None);
    };
    if !matches!(target, InterruptTarget::Selector(_)) {
        return Err(ctx.err(n, "count goes with `selector`"));
    }
    let c = match &n.value {
        Value::Number(x) => x
            .as_u64()
            .filter(|c| (1..=MAX_INTERRUPT_COUNT).contains(c))
            .and_then(|c| usize::try_from(c).ok()),
        _ => None,
    };
    c.map(Some).ok_or_else(|| {
        ctx.err(
            n,
            format!("count must be an integer from 1 to {MAX_INTERRUPT_COUNT}"),
        )
    })
}

fn node_condition_step(ctx: &Ctx, body: &Node) -> Result<NodeConditionStep, ScenarioError> {
    check_keys(
        ctx,
        body,
        &["node", "selector", "count", "type", "status"],
        "nodeCondition",
    )?;
    let target = match (body.get("node"), body.get("selector")) {
        (Some(n), None) => {
            let v = ctx.str(n, "node")?;
            if v.is_empty() {
                return Err(ctx.err(n, "node must name a node"));
            }
            InterruptTarget::Node(v.to_string())
        }
        (None, Some(n)) => {
            let v = ctx.str(n, "selector")?;
            if let Err(e) = crate::cluster::Selector::parse(v) {
                return Err(ctx.err(n, format!("selector {v:?}: {e}")));
            }
            InterruptTarget::Selector(v.to_string())
        }
        (Some(_), Some(n)) => {
            return Err(ctx.err(
                n,
                "nodeCondition names its nodes one way: `selector` cannot go with `node`",
            ));
        }
        (None, None) => {
            return Err(ctx.err(
                body,
                "nodeCondition needs `node` (a node's name) or `selector` (label=value,...)",
            ));
        }
    };
    let count = selector_count(ctx, body, &target)?;
    let type_node = body
        .get("type")
        .ok_or_else(|| ctx.err(body, "nodeCondition needs `type`, e.g. Ready"))?;
    let type_ = ctx.str(type_node, "type")?.to_string();
    if type_.is_empty() {
        return Err(ctx.err(type_node, "type must name a condition, e.g. Ready"));
    }
    let status_node = body
        .get("status")
        .ok_or_else(|| ctx.err(body, "nodeCondition needs `status`: True, False or Unknown"))?;
    let status = ctx.str(status_node, "status")?.to_string();
    if !["True", "False", "Unknown"].contains(&status.as_str()) {
        return Err(ctx.err(
            status_node,
            format!("status {status:?}: expected True, False or Unknown"),
        ));
    }
    Ok(NodeConditionStep {
        target,
        count,
        type_,
        status,
    })
}

fn commit_step(ctx: &Ctx, body: &Node) -> Result<CommitStep, ScenarioError> {
    check_keys(ctx, body, &["message", "files", "prune"], "commit")?;
    let message = match body.get("message") {
        Some(n) => ctx.str(n, "message")?.to_string(),
        None => "simulated commit".to_string(),
    };
    let prune = match body.get("prune") {
        Some(n) => match n.value {
            Value::Bool(b) => b,
            _ => return Err(ctx.err(n, "prune must be true or false")),
        },
        None => false,
    };
    let Some(files_node) = body.get("files") else {
        return Err(ctx.err(
            body,
            "commit needs `files`: a mapping of repository paths to their new content (null deletes the file)",
        ));
    };
    if !matches!(files_node.value, Value::Map(_)) {
        return Err(ctx.err(
            files_node,
            "files must be a mapping of repository paths to their new content",
        ));
    }
    let mut files = Vec::new();
    for (key, n) in entries(files_node) {
        let path = key.name.as_str();
        let components: Vec<&str> = path.split('/').collect();
        if path.is_empty()
            || path.starts_with('/')
            || components
                .iter()
                .any(|c| c.is_empty() || *c == "." || *c == ".." || *c == ".git")
        {
            return Err(ctx.err_at(
                key.pos,
                format!(
                    "{path:?} is not a path inside the repository such as nodepools/general.yaml"
                ),
            ));
        }
        let content = match &n.value {
            Value::Str(text) => Some(text.clone().into_bytes()),
            Value::Null => None,
            Value::Map(_) if n.get("file").is_some() => {
                check_keys(ctx, n, &["file"], "a commit file")?;
                let f = n.get("file").unwrap_or(n);
                let from = ctx.path(f, "file")?;
                Some(
                    std::fs::read(&from)
                        .map_err(|e| ctx.err(f, format!("cannot read {}: {e}", from.display())))?,
                )
            }
            _ => {
                return Err(ctx.err(
                    n,
                    "a file's content is a string (a YAML block), null to delete it, or {file: path}",
                ));
            }
        };
        files.push(CommitFile {
            path: path.to_string(),
            content,
            pos: key.pos,
        });
    }
    Ok(CommitStep {
        message,
        files,
        prune,
        scenario: ctx.file.to_string(),
    })
}

/// `1h30m`, `45s`: durations as the scenario writes them.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if sec > 0 || out.is_empty() {
        out.push_str(&format!("{sec}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Scenario, ScenarioError> {
        parse("s.yaml", Path::new("dir"), s.as_bytes())
    }

    #[test]
    fn a_full_scenario_parses() {
        let s = parse_str(
            "config: ../repo\nzones: [z1, z2]\ncloud:\n  launchDelay: 30s\n  insufficientCapacity:\n    - {instanceType: m5.large, capacityType: spot, from: 0s, until: 1h}\ntimeline:\n  - at: 0s\n    apply:\n      - {apiVersion: v1, kind: Pod, metadata: {name: p}}\n  - at: 10m\n    scale: {deployment: web, replicas: 3}\n  - advance: 5m\n  - delete: {kind: Pod, selector: app=web}\n",
        )
        .unwrap();
        assert_eq!(s.config, Path::new("dir/../repo"));
        assert_eq!(s.zones, ["z1", "z2"]);
        assert_eq!(s.cloud.launch_delay, Duration::from_secs(30));
        let ats: Vec<u64> = s.steps.iter().map(|s| s.at.as_secs()).collect();
        assert_eq!(ats, [0, 600, 900, 900]);
        assert_eq!(s.until, Duration::from_secs(900) + DEFAULT_TAIL);
        assert_eq!(s.start, parse_rfc3339(DEFAULT_START).unwrap());
    }

    /// `cloud.reservations`: every field read, defaults filled in, and bad
    /// input refused at its line.
    #[test]
    fn reservations_parse_and_bad_ones_are_refused_at_their_line() {
        let s = parse_str(
            "config: r\nzones: [z1]\ncloud:\n  reservations:\n    - {id: cr-01, instanceType: m5.large, zone: z1, count: 2, type: capacity-block, instanceMatchCriteria: open, tags: {team: ml}, from: 10m, until: 2h}\n    - {id: cr-02, instanceType: m5.large, zone: z1, count: 1}\n",
        )
        .unwrap();
        let [a, b] = s.cloud.reservations.as_slice() else {
            panic!("two reservations: {:?}", s.cloud.reservations);
        };
        assert_eq!(
            (
                a.count,
                a.capacity_block,
                a.instance_match_criteria.as_str()
            ),
            (2, true, "open")
        );
        assert_eq!(
            (a.from, a.until),
            (Duration::from_secs(600), Some(Duration::from_secs(7200)))
        );
        assert_eq!(a.tags["team"], "ml");
        assert_eq!(
            (
                b.capacity_block,
                b.instance_match_criteria.as_str(),
                b.until
            ),
            (false, "targeted", None)
        );
        let line = "config: r\nzones: [z1]\ncloud:\n  reservations:\n    - ";
        for (entry, expected) in [
            (
                "{id: cr-01, instanceType: m5.large, zone: z1, count: 0}",
                "5:60: error: count must be an integer from 1 to 10000",
            ),
            (
                "{id: cr-01, instanceType: m5.large, zone: z9, count: 1}",
                "5:49: error: zone \"z9\" is not one of the scenario's zones (z1)",
            ),
            (
                "{id: r-01, instanceType: m5.large, zone: z1, count: 1}",
                "5:12: error: id \"r-01\" is not a capacity reservation id",
            ),
            (
                "{id: cr-01, zone: z1, count: 1}",
                "5:7: error: a reservation needs `instanceType`",
            ),
            (
                "{id: cr-01, instanceType: m5.large, zone: z1, count: 1, type: spot}",
                "5:69: error: type \"spot\" is not one of default, capacity-block",
            ),
            (
                "{id: cr-01, instanceType: m5.large, zone: z1, count: 1, until: 0s}",
                "5:7: error: the window ends before it starts",
            ),
        ] {
            let e = parse_str(&format!("{line}{entry}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(expected), "{entry}: {e}");
        }
        let twice = "{id: cr-01, instanceType: m5.large, zone: z1, count: 1}";
        let e = parse_str(&format!("{line}{twice}\n    - {twice}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("6:7: error: reservation cr-01 is listed twice"),
            "{e}"
        );
    }

    #[test]
    fn placement_groups_parse_and_bad_ones_are_refused_at_their_line() {
        let s = parse_str(
            "config: r\ncloud:\n  placementGroups:\n    - {name: hpc, strategy: partition, partitions: 3}\n    - {name: tight, id: pg-0a1b, strategy: cluster}\n    - {name: apart, strategy: spread}\n",
        )
        .unwrap();
        let [hpc, tight, apart] = s.cloud.placement_groups.as_slice() else {
            panic!("three groups: {:?}", s.cloud.placement_groups);
        };
        assert_eq!(hpc.partitions(), ["1", "2", "3"]);
        assert!(
            hpc.id.starts_with("pg-0") && hpc.id.len() == 20,
            "{}",
            hpc.id
        );
        assert_eq!((tight.id.as_str(), tight.partition_count), ("pg-0a1b", 0));
        assert_eq!(apart.spread_level.as_deref(), Some("rack"));
        let line = "config: r\ncloud:\n  placementGroups:\n    - ";
        for (entry, expected) in [
            (
                "{name: hpc, strategy: partition}",
                "4:7: error: a partition group needs `partitions`",
            ),
            (
                "{name: hpc, strategy: partition, partitions: 8}",
                "4:52: error: partitions must be an integer from 1 to 7",
            ),
            (
                "{name: hpc, strategy: cluster, partitions: 2}",
                "4:50: error: only a partition group has `partitions`",
            ),
            (
                "{name: hpc, strategy: tight}",
                "4:29: error: strategy \"tight\" is not one of cluster, partition, spread",
            ),
            (
                "{name: hpc, id: hpc, strategy: cluster}",
                "4:23: error: id \"hpc\" is not a placement group id",
            ),
            (
                "{strategy: cluster}",
                "4:7: error: a placement group needs `name`",
            ),
        ] {
            let e = parse_str(&format!("{line}{entry}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(expected), "{entry}: {e}");
        }
        let twice = "{name: hpc, strategy: cluster}";
        let e = parse_str(&format!("{line}{twice}\n    - {twice}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("5:7: error: placement group hpc"), "{e}");
    }

    #[test]
    fn pods_set_the_default_termination_grace_period() {
        let s = parse_str("config: r\n").unwrap();
        assert_eq!(s.pods.termination_grace_period, Duration::from_secs(30));
        let s = parse_str("config: r\npods: {terminationGracePeriod: 2m}\n").unwrap();
        assert_eq!(s.pods.termination_grace_period, Duration::from_secs(120));
        let s = parse_str("config: r\npods: {terminationGracePeriod: 0s}\n").unwrap();
        assert_eq!(s.pods.termination_grace_period, Duration::ZERO);
        assert_eq!(
            err("config: r\npods: {terminationGracePeriod: 1.5s}\n"),
            "2:32: terminationGracePeriod: invalid duration \"1.5s\": use hours, minutes and seconds such as 24h, 1h30m or 30s"
        );
        assert_eq!(
            err("config: r\npods: {grace: 1m}\n"),
            "2:8: unknown field `grace` in pods; expected one of terminationGracePeriod"
        );
    }

    fn err(s: &str) -> String {
        let e = parse_str(s).unwrap_err();
        format!("{}:{}: {}", e.line, e.column, e.message)
    }

    #[test]
    fn node_condition_steps_name_their_nodes_one_way_and_a_known_status() {
        assert_eq!(
            err(
                "config: r\ntimeline:\n  - at: 1m\n    nodeCondition: {node: n1, type: Ready, status: Broken}\n"
            ),
            "4:52: status \"Broken\": expected True, False or Unknown"
        );
        assert_eq!(
            err(
                "config: r\ntimeline:\n  - at: 1m\n    nodeCondition: {node: n1, selector: a=b, type: Ready, status: Unknown}\n"
            ),
            "4:41: nodeCondition names its nodes one way: `selector` cannot go with `node`"
        );
        assert_eq!(
            err(
                "config: r\ntimeline:\n  - at: 1m\n    nodeCondition: {node: n1, count: 2, type: Ready, status: Unknown}\n"
            ),
            "4:38: count goes with `selector`"
        );
    }

    #[test]
    fn bad_input_names_the_line() {
        assert_eq!(
            err("config: r\ntimeline:\n  - at: 1m\n    launch: {}\n"),
            "4:5: unknown step `launch`; expected one of apply, scale, delete, commit, interrupt, nodeCondition, advance, publishImage, upgradeKubernetes, restart"
        );
        assert_eq!(
            err(
                "config: r\ntimeline:\n  - at: 10m\n    advance: 1m\n  - at: 5m\n    advance: 1m\n"
            ),
            "5:9: time goes backwards: this step is at 5m but the previous one is at 11m"
        );
        assert_eq!(
            err("config: r\ntimeline:\n  - at: 1m\n    commit: {}\n"),
            "4:13: commit needs `files`: a mapping of repository paths to their new content (null deletes the file)"
        );
        assert_eq!(
            err("config: r\ntimeline:\n  - commit:\n      files: {../x.yaml: a}\n"),
            "4:15: \"../x.yaml\" is not a path inside the repository such as nodepools/general.yaml"
        );
        assert_eq!(
            err("config: r\ntimeline:\n  - commit:\n      files: {a.yaml: 1}\n"),
            "4:23: a file's content is a string (a YAML block), null to delete it, or {file: path}"
        );
        assert_eq!(
            err("config: r\ntimeline:\n  - apply: [{kind: Pod}]\n"),
            "3:13: a manifest needs apiVersion and kind"
        );
        assert_eq!(
            err("config: r\nzones: []\n"),
            "2:8: zones must be a non-empty list of zone names"
        );
        assert_eq!(
            err("config: r\nfoo: 1\n"),
            "2:1: unknown field `foo` in the scenario; expected one of start, config, catalog, region, zones, initial, cloud, pods, settings, timeline, until, faults"
        );
        assert_eq!(
            err("config: r\nsettings: {featureGates: \"SpotToSpot=true\"}\n"),
            "2:26: unknown feature gate \"SpotToSpot\"; the known gates are NodeRepair (default false), ReservedCapacity (default true), SpotToSpotConsolidation (default false), NodeOverlay (default false), StaticCapacity (default false), CapacityBuffer (default false)"
        );
        assert_eq!(
            err("config: r\nsettings: {preferencePolicy: ignore}\n"),
            "2:30: preferencePolicy must be Respect or Ignore, not \"ignore\""
        );
        assert_eq!(
            err("config: r\nsettings: {spotToSpot: true}\n"),
            "2:12: unknown field `spotToSpot` in settings; expected one of featureGates, launchConcurrency, preferencePolicy"
        );
    }

    #[test]
    fn a_commit_step_parses_writes_and_deletes() {
        let s = parse_str(
            "config: r\ntimeline:\n  - at: 5m\n    commit:\n      message: raise\n      prune: true\n      files:\n        nodepools/a.yaml: |\n          kind: NodePool\n        old.yaml: null\n",
        )
        .unwrap();
        assert_eq!(
            s.steps[0].action,
            Action::Commit(CommitStep {
                message: "raise".into(),
                files: vec![
                    CommitFile {
                        path: "nodepools/a.yaml".into(),
                        content: Some(b"kind: NodePool\n".to_vec()),
                        pos: Pos { line: 8, column: 9 },
                    },
                    CommitFile {
                        path: "old.yaml".into(),
                        content: None,
                        pos: Pos {
                            line: 10,
                            column: 9
                        },
                    },
                ],
                prune: true,
                scenario: "s.yaml".into(),
            })
        );
    }

    #[test]
    fn interrupt_steps_parse() {
        use crate::interruption::{InstanceState, Kind};
        let s = parse_str(
            "config: r\ntimeline:\n  - at: 5m\n    interrupt: {kind: spot-interruption, node: n1}\n  - interrupt: {kind: state-change, instance: i-0123456789abcdef0, state: stopped}\n  - interrupt: {kind: rebalance, selector: \"karpenter.sh/capacity-type=spot\", count: 2}\n",
        )
        .unwrap();
        let steps: Vec<&Action> = s.steps.iter().map(|s| &s.action).collect();
        assert_eq!(
            steps,
            [
                &Action::Interrupt(InterruptStep {
                    kind: Kind::SpotInterruption,
                    target: InterruptTarget::Node("n1".into()),
                    count: None,
                    state: None,
                }),
                &Action::Interrupt(InterruptStep {
                    kind: Kind::StateChange,
                    target: InterruptTarget::Instance("i-0123456789abcdef0".into()),
                    count: None,
                    state: Some(InstanceState::Stopped),
                }),
                &Action::Interrupt(InterruptStep {
                    kind: Kind::Rebalance,
                    target: InterruptTarget::Selector("karpenter.sh/capacity-type=spot".into()),
                    count: Some(2),
                    state: None,
                }),
            ]
        );
    }

    #[test]
    fn bad_interrupt_steps_name_the_field() {
        let step = |body: &str| err(&format!("config: r\ntimeline:\n  - interrupt: {body}\n"));
        let cases = [
            (
                "{node: a}",
                "3:16: interrupt needs `kind`: one of spot-interruption, rebalance, scheduled-change, state-change",
            ),
            (
                "{kind: spot, node: a}",
                "3:23: unknown interruption kind \"spot\"; expected one of spot-interruption, rebalance, scheduled-change, state-change",
            ),
            (
                "{kind: rebalance}",
                "3:16: interrupt needs one of `node` (a node's name), `instance` (an instance id) or `selector` (label=value,...)",
            ),
            (
                "{kind: rebalance, node: a, instance: i-0123456789abcdef0}",
                "3:53: interrupt names its instances one way: `instance` cannot go with `node`",
            ),
            (
                "{kind: rebalance, instance: web-1}",
                "3:44: \"web-1\" is not an EC2 instance id such as i-0123456789abcdef0",
            ),
            (
                "{kind: rebalance, selector: \"a in b\"}",
                "3:44: selector \"a in b\": unable to parse requirement: found 'b' expected: '('",
            ),
            (
                "{kind: rebalance, node: a, count: 2}",
                "3:50: count goes with `selector`",
            ),
            (
                "{kind: rebalance, selector: \"a=b\", count: 0}",
                "3:58: count must be an integer from 1 to 100000",
            ),
            (
                "{kind: state-change, node: a}",
                "3:16: a state-change needs `state`: one of stopping, stopped, shutting-down, terminated",
            ),
            (
                "{kind: state-change, node: a, state: running}",
                "3:53: unknown state \"running\"; expected one of stopping, stopped, shutting-down, terminated",
            ),
            (
                "{kind: rebalance, node: a, state: stopped}",
                "3:50: state goes with kind: state-change",
            ),
            (
                "{kind: rebalance, node: a, zone: x}",
                "3:43: unknown field `zone` in interrupt; expected one of kind, node, instance, selector, count, state",
            ),
        ];
        let wrong: Vec<String> = cases
            .iter()
            .filter_map(|(body, want)| {
                let got = step(body);
                (got != *want).then(|| format!("{body}: got {got:?}, want {want:?}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_secs(5400)), "1h30m");
        assert_eq!(human(Duration::ZERO), "0s");
        assert_eq!(human(Duration::from_secs(61)), "1m1s");
    }
}
