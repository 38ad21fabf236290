//! The simulated EC2 behind `dovetail simulate`: a [`CloudProvider`] that
//! launches instances from an instance-type catalog on an injected clock,
//! with scripted insufficient-capacity windows and a log of every call.
//!
//! Everything is synchronous and deterministic: the same configuration and
//! the same sequence of calls at the same clock times give the same
//! instances, ids, prices and call log, on every run and machine. There are
//! no background tasks; time-dependent state (an instance becoming
//! `Running`, a capacity window opening or closing) is computed from the
//! clock whenever it is read.
//!
//! # Offerings
//!
//! The catalog (the shared catalog format, see [`SimEc2::builtin_catalog`]
//! and [`SimEc2::load_catalog`]) is prepared once, when the provider is
//! built:
//! - offerings are restricted to the configured zones: an offering in
//!   another zone is dropped, and no offering is invented in a configured
//!   zone the catalog does not list for a type;
//! - with spot enabled, every on-demand offering gets a spot offering in the
//!   same zone, priced as described below, unless the catalog already lists
//!   a spot offering there (the catalog's price wins); with spot disabled,
//!   spot offerings are dropped;
//! - reserved offerings are dropped (capacity reservations are not
//!   simulated);
//! - a type left without offerings is dropped;
//! - each type's zone, capacity-type and region requirements are rewritten
//!   to match its remaining offerings and the configured region.
//!
//! # Spot prices
//!
//! The catalogs list on-demand prices only, so spot prices follow a fixed
//! model: `spot = on-demand × factor`, where the factor depends only on the
//! instance type's name, the zone and whether the type is accelerated:
//!
//! - `h` is the 64-bit FNV-1a hash of the UTF-8 bytes of
//!   `<instance type>/<zone>` (e.g. `m7i.large/us-east-1a`), passed through
//!   MurmurHash3's 64-bit finalizer (`fmix64`) so that zone names differing
//!   only in their last letter still get unrelated factors;
//! - `factor = low + (high − low) × (h mod 1001) / 1000`;
//! - `[low, high]` is `[0.40, 0.55]` for accelerated types (a positive
//!   `karpenter.k8s.aws/instance-gpu-count` or
//!   `karpenter.k8s.aws/instance-accelerator-count` label) and
//!   `[0.30, 0.45]` for every other type (general purpose, compute and
//!   memory optimised, burstable, storage).
//!
//! Prices are therefore reproducible across runs and machines, differ
//! between zones of the same type (so zone choice matters, as in EC2), and
//! never change during a run.
//!
//! # Launch choice
//!
//! [`CloudProvider::create`] launches like EC2 Fleet as the reference
//! drives it. The overrides are the offerings the NodeClaim's requirements
//! allow (instance type, zone, capacity type and the other instance labels)
//! whose type fits the NodeClaim's resource requests, which are available
//! in the catalog, which the caller has not marked unavailable, and whose
//! type has an image among those the node class resolves to. The fleet's
//! capacity type is spot when any spot override exists, else on-demand.
//! Overrides are tried cheapest first (ties go to the instance type name,
//! then the zone); one inside an active insufficient-capacity window fails,
//! as EC2 reports `InsufficientInstanceCapacity` for it, and the next is
//! tried. The instance comes from the first that has capacity, and the
//! failed ones are returned in [`Launched::refused`]; when every override
//! fails the launch is [`CloudError::InsufficientCapacity`] listing them.
//! The simulated EC2 never hides an offering ahead of a launch: capacity
//! is learnt by failing, as with EC2.
//!
//! The instance gets the resolved image whose requirements its type meets,
//! the first selected subnet of its zone, and every selected security
//! group (see [`nodeclass`]).
//!
//! # Lifecycle
//!
//! An instance is `Pending` from its launch until `launch_delay` has passed,
//! then `Running` ([`SimEc2::running_since`]). Termination, by
//! [`CloudProvider::delete`] or [`SimEc2::terminate_externally`], passes
//! through `ShuttingDown` to `Terminated` instantly: the instance is gone at
//! once, and later `get`s and `delete`s of it are `NotFound`.
//!
//! # Interruptions
//!
//! [`SimEc2::interrupt`] sends what EC2 and AWS Health send about
//! instances, as the EventBridge JSON of [`crate::interruption::events`]
//! (account [`SIM_ACCOUNT`]), for the caller to deliver to the controller:
//! - a spot interruption warning per spot instance; EC2 reclaims the
//!   instance [`SPOT_RECLAIM_NOTICE`] (two minutes) later, whatever the
//!   controller did meanwhile ([`SimEc2::take_reclaimed`],
//!   [`SimEc2::next_reclaim`]);
//! - a rebalance recommendation per instance; nothing else happens;
//! - one AWS Health scheduled change for all the instances (a retirement
//!   two weeks away); nothing else happens in the run;
//! - a state-change notification per instance, which leaves at once: the
//!   simulated EC2 has no stopped state, and a stopped instance runs
//!   nothing, so stopping, stopped, shutting-down and terminated all take
//!   the instance away.
//!
//! # Call log
//!
//! Every provider call, and every [`SimEc2::terminate_externally`], is
//! recorded with the clock time and its outcome ([`SimEc2::calls`]): the
//! offering a launch chose or the error it returned, for tests and the
//! simulation report. Like the reference autoscaler's fake provider, the
//! simulated EC2 can be told to fail its next call ([`SimEc2::fail_next`]).
//!
//! A requirement the NodeClaim cannot meet at all (no instance type or
//! offering allows it) is `InvalidRequest`; offerings that exist but cannot
//! launch now (inside an insufficient-capacity window, or unavailable in the
//! catalog) make `InsufficientCapacity`, listing them.

use std::collections::BTreeMap;
use std::future::{Future, ready};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub mod nodeclass;
pub mod reservations;

use std::collections::BTreeSet;

use self::nodeclass::{Account, SimImage, SimSecurityGroup, SimSubnet};
use self::reservations::SimReservation;
use crate::api::{self, EC2NodeClass, NodeClaim, NodePool};
use crate::clock::{Clock, Timestamp};
use crate::cloud::select::{
    claim_requests, fits_node_class, image_for, instance_constraints, instance_labels,
    launch_priority, nodepool_constraints, offering_key, requirements_of, type_allowed,
};
use crate::cloud::{
    CloudError, CloudProvider, Instance, InstanceState, Launched, NodeClassResolution, OfferingKey,
    instance_drift,
};
use crate::convert::kubelet_settings;
use crate::drift::DriftReason;
use crate::model::catalog::{CatalogError, parse_catalog, read_catalog};
use crate::model::labels::{CAPACITY_TYPE, REGION, ZONE, is_well_known};
use crate::model::{InstanceType, KubeletSettings, Offering, Requirement};

/// The account id in the simulated EC2's event JSON and ARNs.
pub const SIM_ACCOUNT: &str = "111122223333";
/// How long after a spot interruption warning EC2 reclaims the instance.
pub const SPOT_RECLAIM_NOTICE: Duration = Duration::from_secs(120);

/// The region of the simulated EC2 unless configured otherwise.
pub const DEFAULT_REGION: &str = "us-east-1";
/// RunInstances to node registration, unless configured otherwise.
pub const DEFAULT_LAUNCH_DELAY: Duration = Duration::from_secs(45);

/// The spot discount range of accelerated (GPU, Neuron) types: their spot
/// market is tighter, so discounts are smaller.
const ACCELERATED_SPOT_FACTOR: (f64, f64) = (0.40, 0.55);
/// The spot discount range of every other type.
const STANDARD_SPOT_FACTOR: (f64, f64) = (0.30, 0.45);
/// Steps of the spot factor within its range (1001 values, 0.00015 apart).
const SPOT_FACTOR_STEPS: u64 = 1000;

/// Labels whose positive value marks an accelerated type.
const ACCELERATOR_COUNT_LABELS: [&str; 2] = [
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-accelerator-count",
];

/// The embedded built-in catalog.
const BUILTIN_CATALOG: &str = include_str!("sim-catalog.json");
/// The name the built-in catalog has in errors.
const BUILTIN_CATALOG_NAME: &str = "<built-in catalog>";

/// A scripted period in which matching offerings fail to launch with
/// insufficient capacity, as a scenario's `cloud.insufficientCapacity`
/// entries describe. Unset filters match every offering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityWindow {
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    /// The window is active from this time on (inclusive) ...
    pub from: Timestamp,
    /// ... until this time (exclusive); open-ended if unset.
    pub until: Option<Timestamp>,
}

impl CapacityWindow {
    /// Is `offering` refused at `now`?
    pub fn refuses(&self, offering: &OfferingKey, now: Timestamp) -> bool {
        self.refuses_parts(
            &offering.instance_type,
            &offering.zone,
            &offering.capacity_type,
            now,
        )
    }

    fn refuses_parts(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
        now: Timestamp,
    ) -> bool {
        let matches =
            |filter: &Option<String>, value: &str| filter.as_deref().is_none_or(|f| f == value);
        self.from <= now
            && self.until.is_none_or(|until| now < until)
            && matches(&self.instance_type, instance_type)
            && matches(&self.zone, zone)
            && matches(&self.capacity_type, capacity_type)
    }
}

/// A scripted period in which every launch fails with `error`, as a
/// scenario's `cloud.launchErrors` entries describe: `AccessDenied` (the
/// controller's role may not call CreateFleet or pass the instance
/// profile) or `InternalError` (EC2 answers 500).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchErrorWindow {
    pub error: String,
    pub from: Timestamp,
    pub until: Option<Timestamp>,
}

impl LaunchErrorWindow {
    /// The errors a window may script.
    pub const ERRORS: [&str; 2] = ["AccessDenied", "InternalError"];

    fn error_at(&self, now: Timestamp) -> Option<CloudError> {
        if now < self.from || self.until.is_some_and(|u| now >= u) {
            return None;
        }
        Some(match self.error.as_str() {
            "AccessDenied" => CloudError::AccessDenied {
                action: "ec2:CreateFleet".into(),
                message: "UnauthorizedOperation: You are not authorized to perform this operation (scripted)".into(),
            },
            _ => CloudError::Api(
                "InternalError: An internal error has occurred (scripted)".into(),
            ),
        })
    }
}

/// How the simulated EC2 behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// The instance types, as read from a catalog (on-demand offerings).
    pub catalog: Vec<InstanceType>,
    pub region: String,
    /// The zones instances launch in; offerings elsewhere are dropped.
    pub zones: Vec<String>,
    /// From launch until the instance is `Running`.
    pub launch_delay: Duration,
    pub insufficient_capacity: Vec<CapacityWindow>,
    /// Periods in which every launch fails.
    pub launch_errors: Vec<LaunchErrorWindow>,
    /// How long each EC2 API call (CreateFleet, TerminateInstances,
    /// DescribeInstances) takes to answer; zero by default.
    pub call_latency: Duration,
    /// Whether spot offerings exist.
    pub spot: bool,
    /// The cluster's Kubernetes version (AMI aliases resolve for it).
    pub kubernetes_version: String,
    /// Images registered in the account, for selector terms by id, name or
    /// tags.
    pub images: Vec<SimImage>,
    /// The VPC's subnets; `None` for the default VPC (one subnet per zone,
    /// selected by every term).
    pub subnets: Option<Vec<SimSubnet>>,
    /// The VPC's security groups; `None` for one that every term selects.
    pub security_groups: Option<Vec<SimSecurityGroup>>,
    /// What AMI aliases resolved to in the cluster a run starts from.
    pub observed_aliases: Vec<nodeclass::ObservedAlias>,
    /// The account's capacity reservations.
    pub reservations: Vec<SimReservation>,
    /// The account's placement groups.
    pub placement_groups: Vec<crate::cloud::aws::placement::PlacementGroup>,
    /// How instances' provider ids are written.
    pub provider_ids: ProviderIds,
    /// Whether every call is kept for [`SimEc2::calls`] (a simulation's
    /// report reads them); off for a provider that runs for days.
    pub call_log: bool,
    /// Instance ids are handed out after this one (hex, 17 digits): a
    /// provider that outlives its process starts past the ids of earlier
    /// runs.
    pub first_instance_id: u64,
}

/// The form of an instance's provider id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProviderIds {
    /// `aws:///<zone>/<id>`, as an EC2 node's kubelet sets it.
    #[default]
    Aws,
    /// `kwok://<id>`, the KWOK provider's (the Node is named `<id>`).
    Kwok,
}

impl ProviderIds {
    pub const KWOK_PREFIX: &'static str = "kwok://";

    /// The provider id of instance `id` in `zone`.
    pub fn format(self, zone: &str, id: &str) -> String {
        match self {
            ProviderIds::Aws => format!("aws:///{zone}/{id}"),
            ProviderIds::Kwok => format!("{}{id}", Self::KWOK_PREFIX),
        }
    }

    /// The instance id a provider id of this form names.
    pub fn parse(self, provider_id: &str) -> Option<&str> {
        let id = match self {
            ProviderIds::Aws => provider_id.strip_prefix("aws:///")?.rsplit_once('/')?.1,
            ProviderIds::Kwok => provider_id.strip_prefix(Self::KWOK_PREFIX)?,
        };
        (!id.is_empty() && !id.contains('/')).then_some(id)
    }
}

impl SimConfig {
    /// The defaults of a scenario that sets nothing: region `us-east-1`,
    /// its zones `a`, `b` and `c`, a 45 s launch delay, spot offerings and
    /// no insufficient-capacity windows.
    pub fn new(catalog: Vec<InstanceType>) -> Self {
        SimConfig {
            catalog,
            region: DEFAULT_REGION.to_string(),
            zones: default_zones(DEFAULT_REGION),
            launch_delay: DEFAULT_LAUNCH_DELAY,
            insufficient_capacity: Vec::new(),
            launch_errors: Vec::new(),
            call_latency: Duration::ZERO,
            spot: true,
            kubernetes_version: nodeclass::DEFAULT_KUBERNETES_VERSION.to_string(),
            images: Vec::new(),
            subnets: None,
            security_groups: None,
            observed_aliases: Vec::new(),
            reservations: Vec::new(),
            placement_groups: Vec::new(),
            provider_ids: ProviderIds::Aws,
            call_log: true,
            first_instance_id: 0,
        }
    }
}

/// The default zones of a region: `<region>a`, `<region>b` and `<region>c`.
pub fn default_zones(region: &str) -> Vec<String> {
    ["a", "b", "c"]
        .iter()
        .map(|suffix| format!("{region}{suffix}"))
        .collect()
}

/// The offering an instance was launched on.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub instance_id: String,
    pub offering: OfferingKey,
    /// USD per hour.
    pub price: f64,
    /// Offerings tried first that had no capacity.
    pub refused: Vec<OfferingKey>,
}

/// One call to the simulated EC2 and its outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Create {
        nodeclaim: String,
        result: Result<Launch, CloudError>,
    },
    Delete {
        provider_id: String,
        result: Result<(), CloudError>,
    },
    Get {
        provider_id: String,
        result: Result<InstanceState, CloudError>,
    },
    /// `result` is the number of instances listed.
    List { result: Result<usize, CloudError> },
    /// `result` is the number of instance types returned.
    InstanceTypes {
        nodepool: String,
        nodeclass: String,
        result: Result<usize, CloudError>,
    },
    /// `result` is the number of images resolved.
    ResolveNodeClass {
        nodeclass: String,
        result: Result<usize, CloudError>,
    },
    /// `result` is the number of drift reasons found.
    IsDrifted {
        nodeclaim: String,
        result: Result<usize, CloudError>,
    },
    /// A termination by the simulation (e.g. a spot reclaim), not by the
    /// controller.
    TerminateExternally {
        instance_id: String,
        reason: String,
        result: Result<(), CloudError>,
    },
}

impl Call {
    /// The method name, a bounded label.
    pub fn method(&self) -> &'static str {
        match self {
            Call::Create { .. } => "create",
            Call::Delete { .. } => "delete",
            Call::Get { .. } => "get",
            Call::List { .. } => "list",
            Call::InstanceTypes { .. } => "instance_types",
            Call::ResolveNodeClass { .. } => "resolve_node_class",
            Call::IsDrifted { .. } => "is_drifted",
            Call::TerminateExternally { .. } => "terminate_externally",
        }
    }
}

/// A call and the clock time it was made at.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    pub at: Timestamp,
    pub call: Call,
}

/// The mutable part of the simulated EC2.
#[derive(Debug, Default)]
struct State {
    /// The last instance id handed out.
    last_id: u64,
    /// Live instances by id, stored with state `Pending`; fixed-width hex
    /// ids make this id order also launch order.
    instances: BTreeMap<String, Instance>,
    calls: Vec<CallRecord>,
    /// Whether calls are kept ([`SimConfig::call_log`]).
    call_log: bool,
    next_error: Option<CloudError>,
    /// Images, network and the cluster's version.
    account: Option<Account>,
    /// Spot instances warned of interruption, and when EC2 reclaims them.
    reclaims: BTreeMap<String, Timestamp>,
    /// Instances reclaimed that [`SimEc2::take_reclaimed`] has not handed
    /// out yet, with when.
    reclaimed: Vec<(Timestamp, String)>,
    /// The account's capacity reservations.
    reservations: Vec<SimReservation>,
    /// Bumped whenever an instance is added or removed.
    generation: u64,
    /// What [`SimEc2::instances_now`] last returned: the generation it
    /// was built at, until when it holds (the next pending instance's start),
    /// and the instances.
    view: Option<(u64, Option<Timestamp>, Arc<Vec<Instance>>)>,
}

impl State {
    /// Keeps a call for [`SimEc2::calls`], if calls are kept.
    fn log(&mut self, record: CallRecord) {
        if self.call_log {
            self.calls.push(record);
        }
    }

    /// Live instances launched into reservation `id`.
    fn used(&self, id: &str) -> i64 {
        self.instances
            .values()
            .filter(|i| {
                i.labels
                    .get(api::LABEL_CAPACITY_RESERVATION_ID)
                    .is_some_and(|r| r == id)
            })
            .count() as i64
    }

    /// The reservations `class` holds at `now` (as its status lists them),
    /// and the instances left in each.
    fn held(
        &self,
        class: &EC2NodeClass,
        now: Timestamp,
    ) -> (
        Vec<api::ec2nodeclass::CapacityReservation>,
        crate::cloud::aws::reservations::Availability,
    ) {
        reservations::held(
            &self.reservations,
            |id| self.used(id),
            class
                .spec
                .capacity_reservation_selector_terms
                .as_deref()
                .unwrap_or_default(),
            now,
        )
    }
}

/// Reclaims the spot instances whose two minutes are up at `now`, each at
/// its own time.
fn apply_reclaims(state: &mut State, now: Timestamp) {
    let due: Vec<(String, Timestamp)> = state
        .reclaims
        .iter()
        .filter(|(_, at)| **at <= now)
        .map(|(id, at)| (id.clone(), *at))
        .collect();
    for (id, at) in due {
        state.reclaims.remove(&id);
        state.generation += 1;
        let result = match state.instances.remove(&id) {
            Some(_) => {
                state.reclaimed.push((at, id.clone()));
                Ok(())
            }
            None => Err(CloudError::NotFound(id.clone())),
        };
        state.log(CallRecord {
            at,
            call: Call::TerminateExternally {
                instance_id: id,
                reason: "spot reclaim".into(),
                result,
            },
        });
    }
}

/// The simulated EC2. See the module documentation.
pub struct SimEc2 {
    /// The prepared catalog: offerings in the configured zones, spot added.
    catalog: Vec<InstanceType>,
    region: String,
    launch_delay: Duration,
    windows: Vec<CapacityWindow>,
    launch_errors: Vec<LaunchErrorWindow>,
    call_latency: Duration,
    provider_ids: ProviderIds,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// The catalog as node classes with each kubelet configuration seen so
    /// far see it (allocatable adjusted), computed once per configuration;
    /// there are as many entries as distinct node-class kubelet settings.
    adjusted: Mutex<Vec<(KubeletSettings, Arc<Vec<InstanceType>>)>>,
}

impl std::fmt::Debug for SimEc2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimEc2")
            .field("instance_types", &self.catalog.len())
            .field("region", &self.region)
            .field("launch_delay", &self.launch_delay)
            .field("windows", &self.windows)
            .finish_non_exhaustive()
    }
}

impl SimEc2 {
    pub fn new(config: SimConfig, clock: Arc<dyn Clock>) -> Self {
        let SimConfig {
            catalog,
            region,
            zones,
            launch_delay,
            insufficient_capacity,
            launch_errors,
            call_latency,
            spot,
            kubernetes_version,
            images,
            subnets,
            security_groups,
            observed_aliases,
            reservations,
            placement_groups,
            provider_ids,
            call_log,
            first_instance_id,
        } = config;
        let mut account = Account::new(&zones, &kubernetes_version);
        account.placement_groups = placement_groups;
        account.images = images;
        account.observed = observed_aliases;
        account.subnets = subnets;
        account.security_groups = security_groups;
        let catalog = catalog
            .into_iter()
            .filter_map(|it| prepare(it, &region, &zones, spot))
            .collect();
        SimEc2 {
            catalog,
            region,
            launch_delay,
            windows: insufficient_capacity,
            launch_errors,
            call_latency,
            clock,
            provider_ids,
            state: Mutex::new(State {
                account: Some(account),
                reservations,
                call_log,
                last_id: first_instance_id,
                ..State::default()
            }),
            adjusted: Mutex::new(Vec::new()),
        }
    }

    /// The account's images, network and Kubernetes version as they are now.
    pub fn account(&self) -> Account {
        self.lock()
            .account
            .clone()
            .unwrap_or_else(|| Account::new(&[], ""))
    }

    /// Publishes a new release of an AMI family: `family@latest` resolves to
    /// it from now on, so nodes on the previous one drift.
    pub fn publish_image(&self, family: &str, release: &str) -> Result<(), String> {
        let mut state = self.lock();
        let account = state.account.as_mut().ok_or("no account")?;
        account.publish(family, release)
    }

    /// Upgrades the cluster's Kubernetes version: aliases resolve to the
    /// images of the new version from now on.
    pub fn upgrade_kubernetes(&self, version: &str) {
        if let Some(account) = self.lock().account.as_mut() {
            account.kubernetes_version = version.to_string();
        }
    }

    /// The built-in catalog: 86 us-east-1 instance types with on-demand
    /// offerings in us-east-1a, b and c. An error means the embedded file is
    /// broken, which a unit test rules out.
    pub fn builtin_catalog() -> Result<Vec<InstanceType>, CatalogError> {
        parse_catalog(BUILTIN_CATALOG_NAME, BUILTIN_CATALOG)
    }

    /// Reads a catalog file (`--catalog FILE`, the shared catalog format).
    pub fn load_catalog(path: &Path) -> Result<Vec<InstanceType>, CatalogError> {
        read_catalog(path)
    }

    /// The prepared catalog: offerings in the configured zones, with spot.
    pub fn catalog(&self) -> &[InstanceType] {
        &self.catalog
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.lock().calls.clone()
    }

    /// Makes the next [`CloudProvider`] call, whichever it is, fail with
    /// `error` (recorded in the call log like any other outcome).
    pub fn fail_next(&self, error: CloudError) {
        self.lock().next_error = Some(error);
    }

    /// When an instance is `Running`: its launch plus the launch delay.
    /// `None` if that time is beyond what a [`Timestamp`] can hold.
    pub fn running_since(&self, instance: &Instance) -> Option<Timestamp> {
        instance.launched_at.checked_add(self.launch_delay).ok()
    }

    /// Registers an instance that was running before the simulation began
    /// (a node of the scenario's initial state), so that the cloud knows
    /// it like one it launched. Its id is the last part of the provider id;
    /// its price is the catalog's for its offering (0 when unknown). Fails
    /// on a provider id not of the configured form ([`ProviderIds`]) or an
    /// id in use.
    pub fn adopt(&self, mut instance: Instance) -> Result<(), CloudError> {
        let id = self
            .provider_ids
            .parse(&instance.provider_id)
            .map(str::to_string)
            .ok_or_else(|| {
                CloudError::InvalidRequest(format!(
                    "provider id {:?} is not {}",
                    instance.provider_id,
                    self.provider_ids.format("<zone>", "<instance id>")
                ))
            })?;
        instance.price = self
            .catalog
            .iter()
            .find(|t| t.name == instance.instance_type)
            .and_then(|t| {
                t.offerings
                    .iter()
                    .find(|o| o.zone == instance.zone && o.capacity_type == instance.capacity_type)
            })
            .map_or(0.0, |o| o.price);
        instance.id = id.clone();
        let mut state = self.lock();
        if state.instances.contains_key(&id) {
            return Err(CloudError::InvalidRequest(format!(
                "instance {id} already exists"
            )));
        }
        state.instances.insert(id, instance);
        state.generation += 1;
        Ok(())
    }

    /// Terminates an instance without the controller asking, as EC2 does
    /// when it reclaims spot capacity; `reason` goes into the call log.
    /// Unknown or already terminated instances are `NotFound`.
    pub fn terminate_externally(&self, instance_id: &str, reason: &str) -> Result<(), CloudError> {
        let now = self.clock.now();
        let mut state = self.lock();
        self.settle(&mut state, now);
        state.reclaims.remove(instance_id);
        state.generation += 1;
        let result = match state.instances.remove(instance_id) {
            Some(_) => Ok(()),
            None => Err(CloudError::NotFound(instance_id.to_string())),
        };
        state.log(CallRecord {
            at: now,
            call: Call::TerminateExternally {
                instance_id: instance_id.to_string(),
                reason: reason.to_string(),
                result: result.clone(),
            },
        });
        result
    }

    /// EC2 or AWS Health sends an event of `kind` about instances (see the
    /// module documentation): the event JSON, one body per event, in the
    /// order of `instance_ids`. `state` is the state a state change enters
    /// (one of those that take the instance away). Unknown instances are
    /// `NotFound`; a spot interruption of an on-demand instance is
    /// `InvalidRequest`, as EC2 interrupts only spot instances. Nothing
    /// happens unless every instance can take the event.
    pub fn interrupt(
        &self,
        kind: crate::interruption::Kind,
        instance_ids: &[String],
        state: Option<crate::interruption::InstanceState>,
    ) -> Result<Vec<String>, CloudError> {
        use crate::interruption::{Kind, events};
        let now = self.clock.now();
        let mut st = self.lock();
        self.settle(&mut st, now);
        for id in instance_ids {
            let instance = st
                .instances
                .get(id)
                .ok_or_else(|| CloudError::NotFound(id.clone()))?;
            if kind == Kind::SpotInterruption && instance.capacity_type != api::CAPACITY_TYPE_SPOT {
                return Err(CloudError::InvalidRequest(format!(
                    "instance {id} is {}: EC2 sends spot interruption warnings only for spot instances",
                    instance.capacity_type
                )));
            }
        }
        let region = self.region.as_str();
        let bodies = match kind {
            Kind::SpotInterruption => instance_ids
                .iter()
                .map(|id| {
                    let at = now.checked_add(SPOT_RECLAIM_NOTICE).unwrap_or(now);
                    let due = st.reclaims.entry(id.clone()).or_insert(at);
                    *due = (*due).min(at);
                    events::spot_interruption(id, region, SIM_ACCOUNT, now)
                })
                .collect(),
            Kind::Rebalance => instance_ids
                .iter()
                .map(|id| events::rebalance_recommendation(id, region, SIM_ACCOUNT, now))
                .collect(),
            Kind::ScheduledChange if instance_ids.is_empty() => Vec::new(),
            Kind::ScheduledChange => {
                let ids: Vec<&str> = instance_ids.iter().map(String::as_str).collect();
                vec![events::scheduled_change(&ids, region, SIM_ACCOUNT, now)]
            }
            Kind::StateChange => {
                let to = state.unwrap_or(crate::interruption::InstanceState::Terminated);
                instance_ids
                    .iter()
                    .map(|id| {
                        st.instances.remove(id);
                        st.generation += 1;
                        st.reclaims.remove(id);
                        st.log(CallRecord {
                            at: now,
                            call: Call::TerminateExternally {
                                instance_id: id.clone(),
                                reason: format!("state change: {to}"),
                                result: Ok(()),
                            },
                        });
                        events::state_change(id, to, region, SIM_ACCOUNT, now)
                    })
                    .collect()
            }
        };
        Ok(bodies)
    }

    /// The instances EC2 reclaimed after a spot interruption warning since
    /// the last call, each with the time it was reclaimed.
    pub fn take_reclaimed(&self) -> Vec<(Timestamp, String)> {
        let now = self.clock.now();
        let mut st = self.lock();
        self.settle(&mut st, now);
        std::mem::take(&mut st.reclaimed)
    }

    /// When EC2 next reclaims a spot instance it warned about.
    pub fn next_reclaim(&self) -> Option<Timestamp> {
        self.lock().reclaims.values().min().copied()
    }

    /// The catalog with allocatable as `kubelet` configures it. Called with
    /// the state locked; this lock is only ever taken after that one.
    fn catalog_for(&self, kubelet: &KubeletSettings) -> Arc<Vec<InstanceType>> {
        let mut adjusted = self.adjusted.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, catalog)) = adjusted.iter().find(|(k, _)| k == kubelet) {
            return Arc::clone(catalog);
        }
        let catalog: Arc<Vec<InstanceType>> = Arc::new(
            self.catalog
                .iter()
                .map(|it| it.for_node_class(kubelet))
                .collect(),
        );
        adjusted.push((kubelet.clone(), Arc::clone(&catalog)));
        catalog
    }

    /// A call's answer, after the EC2 API's latency on the simulation's
    /// clock: the call takes effect when it is sent and answers
    /// [`SimConfig::call_latency`] later.
    fn answer<T: Send + 'static>(
        &self,
        result: Result<T, CloudError>,
    ) -> impl Future<Output = Result<T, CloudError>> + Send + 'static {
        let wait = (!self.call_latency.is_zero()).then(|| self.clock.sleep(self.call_latency));
        async move {
            if let Some(w) = wait {
                w.await;
            }
            result
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one provider call: takes an injected error if there is one,
    /// otherwise `op`, and records the outcome with `record`.
    fn call<T>(
        &self,
        op: impl FnOnce(&mut State, Timestamp) -> Result<T, CloudError>,
        record: impl FnOnce(&Result<T, CloudError>) -> Call,
    ) -> Result<T, CloudError> {
        let now = self.clock.now();
        let mut state = self.lock();
        self.settle(&mut state, now);
        let result = match state.next_error.take() {
            Some(error) => Err(error),
            None => op(&mut state, now),
        };
        let call = record(&result);
        state.log(CallRecord { at: now, call });
        result
    }

    /// Every live instance as it is now, as the simulation's kubelet and
    /// report see EC2: not a provider call (nothing is recorded, no injected
    /// error is taken), and shared until an instance is added, removed or
    /// starts running.
    pub fn instances_now(&self) -> Arc<Vec<Instance>> {
        let now = self.clock.now();
        let mut state = self.lock();
        self.settle(&mut state, now);
        if let Some((generation, until, view)) = &state.view
            && *generation == state.generation
            && until.is_none_or(|t| now < t)
        {
            return view.clone();
        }
        let view: Arc<Vec<Instance>> = Arc::new(
            state
                .instances
                .values()
                .map(|i| self.observe(i, now))
                .collect(),
        );
        let until = state
            .instances
            .values()
            .filter_map(|i| self.running_since(i))
            .chain(state.reservations.iter().filter_map(|r| r.end))
            .filter(|t| *t > now)
            .min();
        state.view = Some((state.generation, until, view.clone()));
        view
    }

    /// Brings EC2 up to `now`: spot instances reclaimed, and reservations
    /// that ended: an on-demand capacity reservation's instances run on as
    /// on-demand instances (its labels gone, the on-demand price), a
    /// capacity block's are terminated at its end.
    fn settle(&self, state: &mut State, now: Timestamp) {
        apply_reclaims(state, now);
        let ended: Vec<(String, bool, Timestamp)> = state
            .reservations
            .iter()
            .filter_map(|r| Some((r.id.clone(), r.capacity_block, r.end.filter(|e| *e <= now)?)))
            .collect();
        for (id, capacity_block, end) in ended {
            let members: Vec<String> = state
                .instances
                .values()
                .filter(|i| {
                    i.labels
                        .get(api::LABEL_CAPACITY_RESERVATION_ID)
                        .is_some_and(|r| *r == id)
                })
                .map(|i| i.id.clone())
                .collect();
            for instance_id in members {
                state.generation += 1;
                if capacity_block {
                    state.instances.remove(&instance_id);
                    state.reclaimed.push((end, instance_id.clone()));
                    state.log(CallRecord {
                        at: end,
                        call: Call::TerminateExternally {
                            instance_id,
                            reason: format!("capacity block {id} ended"),
                            result: Ok(()),
                        },
                    });
                    continue;
                }
                let Some(i) = state.instances.get_mut(&instance_id) else {
                    continue;
                };
                let mut labels = (*i.labels).clone();
                {
                    use crate::cloud::aws::reservations::{
                        LABEL_RESERVATION_ID, LABEL_RESERVATION_INTERRUPTIBLE,
                        LABEL_RESERVATION_TYPE,
                    };
                    for k in [
                        LABEL_RESERVATION_ID,
                        LABEL_RESERVATION_TYPE,
                        LABEL_RESERVATION_INTERRUPTIBLE,
                    ] {
                        labels.remove(k);
                    }
                }
                labels.insert(
                    CAPACITY_TYPE.to_string(),
                    api::CAPACITY_TYPE_ON_DEMAND.to_string(),
                );
                i.labels = Arc::new(labels);
                i.capacity_type = api::CAPACITY_TYPE_ON_DEMAND.to_string();
                if let Some(price) = self
                    .catalog
                    .iter()
                    .find(|t| t.name == i.instance_type)
                    .and_then(|t| {
                        t.offerings.iter().find(|o| {
                            o.zone == i.zone && o.capacity_type == api::CAPACITY_TYPE_ON_DEMAND
                        })
                    })
                {
                    i.price = price.price;
                }
            }
        }
    }

    /// An instance as it is at `now`.
    fn observe(&self, instance: &Instance, now: Timestamp) -> Instance {
        let mut out = instance.clone();
        if self.running_since(instance).is_some_and(|t| t <= now) {
            out.state = InstanceState::Running;
        }
        out
    }

    /// Is the offering inside an active insufficient-capacity window?
    fn refused(&self, it: &InstanceType, offering: &Offering, now: Timestamp) -> bool {
        self.windows
            .iter()
            .any(|w| w.refuses_parts(&it.name, &offering.zone, &offering.capacity_type, now))
    }

    fn launch(
        &self,
        state: &mut State,
        now: Timestamp,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
        unavailable: &BTreeSet<OfferingKey>,
    ) -> Result<Launched, CloudError> {
        let requirements = requirements_of(&claim.spec.requirements)
            .map_err(|e| CloudError::InvalidRequest(format!("spec.requirements: {e}")))?;
        let requests = claim_requests(claim)?;
        let kubelet = nodeclass_kubelet(nodeclass)?;
        let resolution = state
            .account
            .as_ref()
            .map(|a| a.resolve(nodeclass))
            .unwrap_or_default();
        if !resolution.is_ready() {
            return Err(CloudError::NodeClassNotReady {
                name: nodeclass.metadata.name.clone().unwrap_or_default(),
                reason: resolution.summary(),
            });
        }
        let constraints = instance_constraints(&requirements);
        let allows = |key: &str, value: &str| requirements.get(key).is_none_or(|r| r.has(value));

        // The fleet's overrides: every offering the NodeClaim allows that is
        // available, not known to be out of capacity, and has an image.
        let mut overrides: Vec<(&InstanceType, &Offering)> = Vec::new();
        let mut allowed_any = false;
        let (held, availability) = state.held(nodeclass, now);
        let catalog = self.catalog_for(&kubelet);
        let catalog: Arc<Vec<InstanceType>> = if held.is_empty() {
            catalog
        } else {
            Arc::new(reservations::with_reserved_offerings(
                &catalog,
                &held,
                &availability,
            ))
        };
        // The reservation labels a node gets only when launched into one:
        // a requirement on them that does not allow their absence keeps the
        // claim to reserved offerings, and picks among reservations (as the
        // AWS launch plans it).
        use crate::cloud::aws::reservations::{
            LABEL_RESERVATION_ID, LABEL_RESERVATION_INTERRUPTIBLE, LABEL_RESERVATION_TYPE,
        };
        let needs_reservation = [
            LABEL_RESERVATION_ID,
            LABEL_RESERVATION_TYPE,
            LABEL_RESERVATION_INTERRUPTIBLE,
        ]
        .iter()
        .any(|k| requirements.get(k).is_some_and(|r| !r.allows_absent()));
        let reservation_allowed = |r: &api::ec2nodeclass::CapacityReservation| {
            crate::cloud::aws::reservations::labels(r)
                .iter()
                .all(|(k, v)| requirements.get(k).is_none_or(|req| req.has(v)))
        };
        let reservation_for = |it: &InstanceType, o: &Offering| {
            crate::cloud::aws::reservations::choose(
                &held,
                &availability,
                &it.name,
                &o.zone,
                reservation_allowed,
            )
        };
        for it in catalog.iter() {
            if !type_allowed(it, &constraints) || !requests.fits_in(&it.allocatable) {
                continue;
            }
            let has_image = image_for(&resolution.amis, it).is_some();
            for o in &it.offerings {
                if allows(ZONE, &o.zone) && allows(CAPACITY_TYPE, &o.capacity_type) {
                    allowed_any = true;
                    let known_out = unavailable.contains(&offering_key(it, o));
                    let subnet = resolution.subnets.iter().any(|s| s.zone == o.zone);
                    let reserved = o.capacity_type == api::CAPACITY_TYPE_RESERVED;
                    if needs_reservation && !reserved {
                        continue;
                    }
                    if reserved && reservation_for(it, o).is_none() {
                        continue;
                    }
                    if o.available && !known_out && has_image && subnet {
                        overrides.push((it, o));
                    }
                }
            }
        }
        if !allowed_any {
            return Err(CloudError::InvalidRequest(
                "no offering of any instance type satisfies the NodeClaim's requirements and resource requests"
                    .to_string(),
            ));
        }
        // Reserved, else spot, else on-demand (Karpenter's order).
        let has = |ct: &str| overrides.iter().any(|(_, o)| o.capacity_type == ct);
        let capacity_type = if has(api::CAPACITY_TYPE_RESERVED) {
            api::CAPACITY_TYPE_RESERVED
        } else if has(api::CAPACITY_TYPE_SPOT) {
            api::CAPACITY_TYPE_SPOT
        } else {
            api::CAPACITY_TYPE_ON_DEMAND
        };
        overrides.retain(|(_, o)| o.capacity_type == capacity_type);
        // A price-overlaid NodeClaim launches in its overlaid order (the
        // reference's `prioritized` fleet strategies), then by price.
        let priority = launch_priority(claim);
        let rank = |it: &InstanceType| {
            priority
                .as_ref()
                .map_or(0, |p| p.get(&it.name).copied().unwrap_or(usize::MAX))
        };
        overrides.sort_by(|(ita, a), (itb, b)| {
            rank(ita)
                .cmp(&rank(itb))
                .then_with(|| a.price.total_cmp(&b.price))
                .then_with(|| ita.name.cmp(&itb.name))
                .then_with(|| a.zone.cmp(&b.zone))
        });
        let mut refused = Vec::new();
        let mut chosen = None;
        for (it, o) in overrides {
            if self.refused(it, o, now) {
                refused.push(offering_key(it, o));
            } else {
                chosen = Some((it, o));
                break;
            }
        }
        let Some((it, offering)) = chosen else {
            if refused.is_empty() {
                // Every allowed offering is unavailable, known to be out of
                // capacity, or without an image or subnet.
                let mut offerings: Vec<OfferingKey> = unavailable
                    .iter()
                    .filter(|k| allows(ZONE, &k.zone) && allows(CAPACITY_TYPE, &k.capacity_type))
                    .cloned()
                    .collect();
                offerings.sort();
                return Err(CloudError::InsufficientCapacity { offerings });
            }
            refused.sort();
            return Err(CloudError::InsufficientCapacity { offerings: refused });
        };
        let key = offering_key(it, offering);

        // Past the ids of adopted instances (a cluster restored from a
        // snapshot of a simulation has ids of this form).
        let id = loop {
            state.last_id += 1;
            let id = format!("i-{:017x}", state.last_id);
            if !state.instances.contains_key(&id) {
                break id;
            }
        };
        let nodepool = claim.nodepool_name().unwrap_or_default().to_string();
        let mut labels = instance_labels(
            it.requirements
                .labels()
                .into_iter()
                .filter(|(k, _)| is_well_known(k))
                .collect(),
            &key,
            &self.region,
            &nodepool,
        );
        if offering.capacity_type == api::CAPACITY_TYPE_RESERVED
            && let Some(r) = reservation_for(it, offering)
        {
            for (k, v) in crate::cloud::aws::reservations::labels(r) {
                labels.insert(k.to_string(), v);
            }
        }
        // The placement group, and in a partition group the partition: the
        // lowest the NodeClaim allows (as the AWS launch asks for it), else
        // EC2's choice, here the one with the fewest of the group's
        // instances.
        if let Some(pg) = state
            .account
            .as_ref()
            .and_then(|a| a.placement_group(nodeclass))
        {
            use crate::cloud::aws::placement::{
                LABEL_PLACEMENT_GROUP_ID, LABEL_PLACEMENT_GROUP_PARTITION,
            };
            labels.insert(LABEL_PLACEMENT_GROUP_ID.to_string(), pg.id.clone());
            let allowed = requirements
                .get(LABEL_PLACEMENT_GROUP_PARTITION)
                .filter(|r| !r.complement)
                .map(|r| r.values.iter().cloned().collect::<Vec<_>>());
            let least_used = || {
                let used = |p: &String| {
                    state
                        .instances
                        .values()
                        .filter(|i| {
                            i.labels.get(LABEL_PLACEMENT_GROUP_ID) == Some(&pg.id)
                                && i.labels.get(LABEL_PLACEMENT_GROUP_PARTITION) == Some(p)
                        })
                        .count()
                };
                pg.partitions()
                    .into_iter()
                    .min_by_key(|p| (used(p), p.parse::<i32>().unwrap_or(i32::MAX)))
            };
            let partition = pg
                .partition_for(allowed.as_deref())
                .map(|p| p.to_string())
                .or_else(least_used);
            if let Some(p) = partition {
                labels.insert(LABEL_PLACEMENT_GROUP_PARTITION.to_string(), p);
            }
        }
        let mut security_group_ids: Vec<String> = resolution
            .security_groups
            .iter()
            .map(|g| g.id.clone())
            .collect();
        security_group_ids.sort();
        let instance = Instance {
            provider_id: self.provider_ids.format(&key.zone, &id),
            id: id.clone(),
            instance_type: key.instance_type.clone(),
            zone: key.zone.clone(),
            capacity_type: key.capacity_type.clone(),
            price: offering.price,
            launched_at: now,
            state: InstanceState::Pending,
            nodeclaim: claim.metadata.name.clone().unwrap_or_default(),
            nodepool,
            labels: labels.into(),
            image_id: image_for(&resolution.amis, it).map(|a| a.id.clone()),
            subnet_id: resolution
                .subnets
                .iter()
                .find(|s| s.zone == key.zone)
                .map(|s| s.id.clone()),
            security_group_ids,
            // As the AWS launch attaches EFA: for a NodeClaim that asks for
            // it, or from a node class that configures its interfaces.
            launch_batch: Vec::new(),
            efa_attached: it.capacity.get(crate::cloud::aws::launch::EFA) > 0
                && (requests.get(crate::cloud::aws::launch::EFA) > 0
                    || nodeclass.spec.network_interfaces.is_some()),
        };
        state.instances.insert(id, instance.clone());
        state.generation += 1;
        Ok(Launched {
            instance: self.observe(&instance, now),
            refused,
        })
    }

    fn instance_types_now(
        &self,
        state: &State,
        now: Timestamp,
        nodepool: &NodePool,
        nodeclass: &EC2NodeClass,
    ) -> Result<Vec<InstanceType>, CloudError> {
        let constraints = nodepool_constraints(nodepool)?;
        let kubelet = nodeclass_kubelet(nodeclass)?;
        // Types no resolved image fits cannot launch from this node class.
        // Offerings inside an insufficient-capacity window are listed as
        // available: EC2 tells only by failing a launch.
        let amis = state
            .account
            .as_ref()
            .map(|a| a.resolve(nodeclass).amis)
            .unwrap_or_default();
        let placement = state
            .account
            .as_ref()
            .and_then(|a| a.placement_group(nodeclass));
        let types: Vec<InstanceType> = self
            .catalog_for(&kubelet)
            .iter()
            .filter(|it| type_allowed(it, &constraints))
            .filter(|it| fits_node_class(it, nodeclass))
            .filter(|it| amis.is_empty() || image_for(&amis, it).is_some())
            .map(|it| {
                let mut it = it.clone();
                if let Some(pg) = placement {
                    pg.add_requirements(&mut it);
                }
                it
            })
            .collect();
        let (held, availability) = state.held(nodeclass, now);
        Ok(if held.is_empty() {
            types
        } else {
            reservations::with_reserved_offerings(&types, &held, &availability)
        })
    }
}

/// Finds a live instance by provider id (`aws:///<zone>/<id>`).
fn find<'a>(state: &'a State, provider_id: &str) -> Result<&'a Instance, CloudError> {
    provider_id
        .rsplit('/')
        .next()
        .and_then(|id| state.instances.get(id))
        .filter(|i| i.provider_id == provider_id)
        .ok_or_else(|| CloudError::NotFound(provider_id.to_string()))
}

impl CloudProvider for SimEc2 {
    fn create(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
        unavailable: &BTreeSet<OfferingKey>,
    ) -> impl Future<Output = Result<Launched, CloudError>> + Send {
        let nodeclaim = claim.metadata.name.clone().unwrap_or_default();
        let result = self.call(
            |state, now| {
                if let Some(e) = self.launch_errors.iter().find_map(|w| w.error_at(now)) {
                    return Err(e);
                }
                self.launch(state, now, claim, nodeclass, unavailable)
            },
            |result| Call::Create {
                nodeclaim,
                result: result
                    .as_ref()
                    .map(|l| Launch {
                        instance_id: l.instance.id.clone(),
                        offering: OfferingKey {
                            instance_type: l.instance.instance_type.clone(),
                            zone: l.instance.zone.clone(),
                            capacity_type: l.instance.capacity_type.clone(),
                        },
                        price: l.instance.price,
                        refused: l.refused.clone(),
                    })
                    .map_err(Clone::clone),
            },
        );
        self.answer(result)
    }

    fn delete(&self, provider_id: &str) -> impl Future<Output = Result<(), CloudError>> + Send {
        let result = self.call(
            |state, _| {
                let id = find(state, provider_id)?.id.clone();
                state.instances.remove(&id);
                state.generation += 1;
                Ok(())
            },
            |result| Call::Delete {
                provider_id: provider_id.to_string(),
                result: result.clone(),
            },
        );
        self.answer(result)
    }

    fn get(&self, provider_id: &str) -> impl Future<Output = Result<Instance, CloudError>> + Send {
        let result = self.call(
            |state, now| find(state, provider_id).map(|i| self.observe(i, now)),
            |result| Call::Get {
                provider_id: provider_id.to_string(),
                result: result.as_ref().map(|i| i.state).map_err(Clone::clone),
            },
        );
        self.answer(result)
    }

    fn list(&self) -> impl Future<Output = Result<Vec<Instance>, CloudError>> + Send {
        let result = self.call(
            |state, now| {
                Ok(state
                    .instances
                    .values()
                    .map(|i| self.observe(i, now))
                    .collect())
            },
            |result| Call::List {
                result: result.as_ref().map(Vec::len).map_err(Clone::clone),
            },
        );
        self.answer(result)
    }

    fn instance_types(
        &self,
        nodepool: &NodePool,
        nodeclass: &EC2NodeClass,
    ) -> impl Future<Output = Result<Vec<InstanceType>, CloudError>> + Send {
        ready(self.call(
            |state, now| self.instance_types_now(state, now, nodepool, nodeclass),
            |result| Call::InstanceTypes {
                nodepool: nodepool.metadata.name.clone().unwrap_or_default(),
                nodeclass: nodeclass.metadata.name.clone().unwrap_or_default(),
                result: result.as_ref().map(Vec::len).map_err(Clone::clone),
            },
        ))
    }

    fn resolve_node_class(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> impl Future<Output = Result<NodeClassResolution, CloudError>> + Send {
        ready(self.call(
            |state, now| {
                let mut r = state
                    .account
                    .as_ref()
                    .map(|a| a.resolve(nodeclass))
                    .unwrap_or_default();
                r.capacity_reservations = state.held(nodeclass, now).0;
                Ok(r)
            },
            |result| Call::ResolveNodeClass {
                nodeclass: nodeclass.metadata.name.clone().unwrap_or_default(),
                result: result.as_ref().map(|r| r.amis.len()).map_err(Clone::clone),
            },
        ))
    }

    fn is_drifted(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
    ) -> impl Future<Output = Result<Vec<DriftReason>, CloudError>> + Send {
        let nodeclaim = claim.metadata.name.clone().unwrap_or_default();
        let provider_id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        ready(self.call(
            |state, _| {
                let instance = find(state, &provider_id)?;
                let mut out: Vec<DriftReason> = nodeclass
                    .status
                    .as_ref()
                    .map(|status| instance_drift(instance, status))
                    .unwrap_or_default();
                // Not for a selector the account has no group for.
                let placement = state
                    .account
                    .as_ref()
                    .and_then(|a| a.placement_group(nodeclass));
                if nodeclass.spec.placement_group_selector.is_none() || placement.is_some() {
                    out.extend(crate::cloud::placement_drift(
                        claim,
                        placement.map(|p| p.id.as_str()),
                    ));
                }
                Ok(out)
            },
            |result| Call::IsDrifted {
                nodeclaim,
                result: result.as_ref().map(Vec::len).map_err(Clone::clone),
            },
        ))
    }
}

/// The catalog entry as the simulated EC2 offers it (see the module
/// documentation), or `None` if it has no offering left.
fn prepare(
    mut it: InstanceType,
    region: &str,
    zones: &[String],
    spot: bool,
) -> Option<InstanceType> {
    let in_zone = |o: &&Offering| zones.contains(&o.zone);
    let on_demand: Vec<Offering> = it
        .offerings
        .iter()
        .filter(in_zone)
        .filter(|o| o.capacity_type == api::CAPACITY_TYPE_ON_DEMAND)
        .cloned()
        .collect();
    let mut offerings = on_demand.clone();
    if spot {
        let listed: Vec<Offering> = it
            .offerings
            .iter()
            .filter(in_zone)
            .filter(|o| o.capacity_type == api::CAPACITY_TYPE_SPOT)
            .cloned()
            .collect();
        let accelerated = is_accelerated(&it);
        for od in &on_demand {
            if !listed.iter().any(|s| s.zone == od.zone) {
                offerings.push(Offering {
                    zone: od.zone.clone(),
                    capacity_type: api::CAPACITY_TYPE_SPOT.to_string(),
                    price: od.price * spot_factor(&it.name, &od.zone, accelerated),
                    available: od.available,
                    reservations: Vec::new(),
                });
            }
        }
        offerings.extend(listed);
    }
    if offerings.is_empty() {
        return None;
    }
    offerings.sort_by(|a, b| {
        a.zone
            .cmp(&b.zone)
            .then_with(|| a.capacity_type.cmp(&b.capacity_type))
    });
    offerings.dedup_by(|a, b| a.zone == b.zone && a.capacity_type == b.capacity_type);
    let values = |f: fn(&Offering) -> &String| {
        Requirement::in_values(offerings.iter().map(|o| f(o).clone()))
    };
    let zone_req = values(|o| &o.zone);
    let capacity_req = values(|o| &o.capacity_type);
    it.requirements.0.insert(ZONE.to_string(), zone_req);
    it.requirements
        .0
        .insert(CAPACITY_TYPE.to_string(), capacity_req);
    it.requirements
        .0
        .insert(REGION.to_string(), Requirement::in_values([region]));
    it.offerings = offerings;
    Some(it)
}

/// Is the type accelerated (GPUs, Neuron devices)?
fn is_accelerated(it: &InstanceType) -> bool {
    ACCELERATOR_COUNT_LABELS.iter().any(|key| {
        it.requirements
            .single_value(key)
            .and_then(|v| v.parse::<i64>().ok())
            .is_some_and(|n| n > 0)
    })
}

/// The spot price factor of an instance type in a zone (see the module
/// documentation): within `[0.40, 0.55]` for accelerated types and
/// `[0.30, 0.45]` for others.
pub fn spot_factor(instance_type: &str, zone: &str, accelerated: bool) -> f64 {
    let (low, high) = if accelerated {
        ACCELERATED_SPOT_FACTOR
    } else {
        STANDARD_SPOT_FACTOR
    };
    let h = fmix64(fnv1a64(
        instance_type
            .bytes()
            .chain(std::iter::once(b'/'))
            .chain(zone.bytes()),
    ));
    // Both operands are at most 1000, so the conversions are exact.
    let step = (h % (SPOT_FACTOR_STEPS + 1)) as f64;
    low + (high - low) * step / SPOT_FACTOR_STEPS as f64
}

/// The 64-bit FNV-1a hash.
fn fnv1a64(bytes: impl IntoIterator<Item = u8>) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .into_iter()
        .fold(OFFSET_BASIS, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// MurmurHash3's 64-bit finalizer: every input bit affects every output bit.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The kubelet settings of the node class.
fn nodeclass_kubelet(nodeclass: &EC2NodeClass) -> Result<KubeletSettings, CloudError> {
    let not_ready = |reason: String| CloudError::NodeClassNotReady {
        name: nodeclass.metadata.name.clone().unwrap_or_default(),
        reason,
    };
    kubelet_settings(nodeclass).map_err(not_ready)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::api::NodeSelectorRequirementWithMinValues;
    use crate::api::ec2nodeclass::KubeletConfiguration;
    use crate::api::nodeclaim::NodeClaimResources;
    use crate::api::nodepool::NodeClaimTemplateMetadata;
    use crate::clock::{ManualClock, parse_rfc3339};
    use crate::model::labels::{INSTANCE_TYPE, NODEPOOL};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    /// Five real us-east-1 types (on-demand Linux prices) offered in zones
    /// a, b, c, plus one type offered only in us-east-1d.
    const CATALOG: &str = r#"{"instanceTypes": [
        {"name": "m5.large", "labels": {"kubernetes.io/arch": "amd64",
            "karpenter.k8s.aws/instance-family": "m5", "karpenter.k8s.aws/instance-cpu": "2"},
         "allocatable": {"cpu": "1930m", "memory": "7134Mi", "pods": "29"},
         "offerings": [{"zone": "us-east-1a", "capacityType": "on-demand", "price": 0.096},
                       {"zone": "us-east-1b", "capacityType": "on-demand", "price": 0.096},
                       {"zone": "us-east-1c", "capacityType": "on-demand", "price": 0.096},
                       {"zone": "us-east-1d", "capacityType": "on-demand", "price": 0.096}]},
        {"name": "c5.large", "labels": {"kubernetes.io/arch": "amd64",
            "karpenter.k8s.aws/instance-family": "c5", "karpenter.k8s.aws/instance-cpu": "2"},
         "allocatable": {"cpu": "1930m", "memory": "3055Mi", "pods": "29"},
         "offerings": [{"zone": "us-east-1a", "capacityType": "on-demand", "price": 0.085},
                       {"zone": "us-east-1b", "capacityType": "on-demand", "price": 0.085},
                       {"zone": "us-east-1c", "capacityType": "on-demand", "price": 0.085}]},
        {"name": "c5.xlarge", "labels": {"kubernetes.io/arch": "amd64",
            "karpenter.k8s.aws/instance-family": "c5", "karpenter.k8s.aws/instance-cpu": "4"},
         "allocatable": {"cpu": "3920m", "memory": "6525Mi", "pods": "58"},
         "offerings": [{"zone": "us-east-1a", "capacityType": "on-demand", "price": 0.17},
                       {"zone": "us-east-1b", "capacityType": "on-demand", "price": 0.17},
                       {"zone": "us-east-1c", "capacityType": "on-demand", "price": 0.17}]},
        {"name": "m6g.large", "labels": {"kubernetes.io/arch": "arm64",
            "karpenter.k8s.aws/instance-family": "m6g", "karpenter.k8s.aws/instance-cpu": "2"},
         "allocatable": {"cpu": "1930m", "memory": "7134Mi", "pods": "29"},
         "offerings": [{"zone": "us-east-1a", "capacityType": "on-demand", "price": 0.077},
                       {"zone": "us-east-1b", "capacityType": "on-demand", "price": 0.077},
                       {"zone": "us-east-1c", "capacityType": "on-demand", "price": 0.077}]},
        {"name": "g5.xlarge", "labels": {"kubernetes.io/arch": "amd64",
            "karpenter.k8s.aws/instance-family": "g5", "karpenter.k8s.aws/instance-cpu": "4",
            "karpenter.k8s.aws/instance-gpu-count": "1"},
         "allocatable": {"cpu": "3920m", "memory": "14162Mi", "pods": "58", "nvidia.com/gpu": "1"},
         "offerings": [{"zone": "us-east-1a", "capacityType": "on-demand", "price": 1.006},
                       {"zone": "us-east-1b", "capacityType": "on-demand", "price": 1.006},
                       {"zone": "us-east-1c", "capacityType": "on-demand", "price": 1.006}]},
        {"name": "m5.xlarge", "labels": {"kubernetes.io/arch": "amd64",
            "karpenter.k8s.aws/instance-family": "m5", "karpenter.k8s.aws/instance-cpu": "4"},
         "allocatable": {"cpu": "3920m", "memory": "14162Mi", "pods": "58"},
         "offerings": [{"zone": "us-east-1d", "capacityType": "on-demand", "price": 0.192}]}
    ]}"#;

    const START: &str = "2026-01-05T00:00:00Z";

    fn ts(s: &str) -> Timestamp {
        parse_rfc3339(s).expect("valid test time")
    }

    fn at(offset_secs: u64) -> Timestamp {
        ts(START)
            .checked_add(Duration::from_secs(offset_secs))
            .expect("in range")
    }

    fn config() -> SimConfig {
        SimConfig::new(parse_catalog("test.json", CATALOG).expect("valid test catalog"))
    }

    fn sim_with(config: SimConfig) -> (SimEc2, ManualClock) {
        let clock = ManualClock::new(ts(START));
        (SimEc2::new(config, Arc::new(clock.clone())), clock)
    }

    fn new_sim() -> (SimEc2, ManualClock) {
        sim_with(config())
    }

    fn window(
        instance_type: Option<&str>,
        zone: Option<&str>,
        capacity_type: Option<&str>,
        from: u64,
        until: Option<u64>,
    ) -> CapacityWindow {
        CapacityWindow {
            instance_type: instance_type.map(str::to_string),
            zone: zone.map(str::to_string),
            capacity_type: capacity_type.map(str::to_string),
            from: at(from),
            until: until.map(at),
        }
    }

    fn req(key: &str, op: api::Operator, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
        NodeSelectorRequirementWithMinValues::new(key, op, values)
    }

    /// A NodeClaim of NodePool `default` with these requirements.
    fn claim(name: &str, requirements: &[NodeSelectorRequirementWithMinValues]) -> NodeClaim {
        let mut c = NodeClaim::test(name);
        c.spec.requirements = requirements.to_vec();
        c.metadata.labels = Some(BTreeMap::from([(
            NODEPOOL.to_string(),
            "default".to_string(),
        )]));
        c
    }

    fn capacity(types: &[&str]) -> NodeSelectorRequirementWithMinValues {
        req(CAPACITY_TYPE, api::Operator::In, types)
    }

    fn spot_or_on_demand() -> NodeSelectorRequirementWithMinValues {
        capacity(&["spot", "on-demand"])
    }

    fn nodeclass() -> EC2NodeClass {
        EC2NodeClass::test("default")
    }

    /// No offering known to be out of capacity.
    fn none() -> BTreeSet<OfferingKey> {
        BTreeSet::new()
    }

    fn offering(instance_type: &str, zone: &str, capacity_type: &str) -> OfferingKey {
        OfferingKey {
            instance_type: instance_type.to_string(),
            zone: zone.to_string(),
            capacity_type: capacity_type.to_string(),
        }
    }

    fn launched(instance: &Instance) -> OfferingKey {
        offering(
            &instance.instance_type,
            &instance.zone,
            &instance.capacity_type,
        )
    }

    fn price_of(sim: &SimEc2, key: &OfferingKey) -> f64 {
        sim.catalog()
            .iter()
            .find(|it| it.name == key.instance_type)
            .and_then(|it| {
                it.offerings
                    .iter()
                    .find(|o| o.zone == key.zone && o.capacity_type == key.capacity_type)
            })
            .map(|o| o.price)
            .expect("offering exists")
    }

    #[test]
    fn builtin_catalog_parses_with_on_demand_offerings_in_three_zones() {
        let catalog = SimEc2::builtin_catalog().expect("the embedded catalog parses");
        assert_eq!(catalog.len(), 86);
        let sim = SimEc2::new(
            SimConfig::new(catalog),
            Arc::new(ManualClock::new(ts(START))),
        );
        assert_eq!(sim.catalog().len(), 86);
        for it in sim.catalog() {
            assert_eq!(it.offerings.len(), 6, "{}", it.name);
        }
    }

    #[test]
    fn offerings_are_restricted_to_the_configured_zones() {
        let mut c = config();
        c.zones = vec!["us-east-1a".into(), "us-east-1d".into()];
        let (sim, _) = sim_with(c);
        let m5 = sim
            .catalog()
            .iter()
            .find(|it| it.name == "m5.large")
            .expect("m5.large offered");
        let keys: Vec<(&str, &str)> = m5
            .offerings
            .iter()
            .map(|o| (o.zone.as_str(), o.capacity_type.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("us-east-1a", "on-demand"),
                ("us-east-1a", "spot"),
                ("us-east-1d", "on-demand"),
                ("us-east-1d", "spot")
            ]
        );
        let zones = m5.requirements.get(ZONE).expect("zone requirement");
        assert!(zones.has("us-east-1a") && zones.has("us-east-1d") && !zones.has("us-east-1b"));
        let c5 = sim
            .catalog()
            .iter()
            .find(|it| it.name == "c5.large")
            .expect("c5.large offered");
        assert!(c5.offerings.iter().all(|o| o.zone == "us-east-1a"));

        // m5.xlarge is only offered in us-east-1d, which the default zones
        // leave out: it is dropped rather than given invented offerings.
        let (sim, _) = new_sim();
        assert!(!sim.catalog().iter().any(|it| it.name == "m5.xlarge"));
        assert_eq!(sim.catalog().len(), 5);
    }

    #[test]
    fn spot_prices_follow_the_documented_model() {
        assert_eq!(fnv1a64(*b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(*b"a"), 0xaf63_dc4c_8601_ec8c);
        // Reference values computed independently from the documented model.
        assert!((spot_factor("m5.large", "us-east-1a", false) - 0.3372).abs() < 1e-12);
        assert!((spot_factor("g5.xlarge", "us-east-1b", true) - 0.5311).abs() < 1e-12);

        let (sim, _) = new_sim();
        let m5 = offering("m5.large", "us-east-1c", "spot");
        assert!((price_of(&sim, &m5) - 0.096 * 0.30885).abs() < 1e-12);
        for it in sim.catalog() {
            let (low, high) = if it.name.starts_with("g5") {
                ACCELERATED_SPOT_FACTOR
            } else {
                STANDARD_SPOT_FACTOR
            };
            for o in it.offerings.iter().filter(|o| o.capacity_type == "spot") {
                let od = price_of(&sim, &offering(&it.name, &o.zone, "on-demand"));
                let factor = o.price / od;
                assert!(
                    (low - 1e-9..=high + 1e-9).contains(&factor),
                    "{} {}: {factor}",
                    it.name,
                    o.zone
                );
            }
        }
        // Same inputs, same prices.
        let (again, _) = sim_with(config());
        assert_eq!(sim.catalog(), again.catalog());
    }

    #[test]
    fn spot_can_be_disabled_and_catalog_spot_prices_win() {
        let mut c = config();
        c.spot = false;
        let (sim, _) = sim_with(c);
        assert!(
            sim.catalog()
                .iter()
                .flat_map(|it| &it.offerings)
                .all(|o| o.capacity_type == "on-demand")
        );
        let ct = sim.catalog()[0]
            .requirements
            .get(CAPACITY_TYPE)
            .expect("set");
        assert!(ct.has("on-demand") && !ct.has("spot"));

        let mut c = config();
        c.catalog[0].offerings.push(Offering {
            zone: "us-east-1a".into(),
            capacity_type: "spot".into(),
            price: 0.0123,
            available: true,
            reservations: Vec::new(),
        });
        let (sim, _) = sim_with(c);
        assert_eq!(
            price_of(&sim, &offering("m5.large", "us-east-1a", "spot")),
            0.0123
        );
        let spot_in_a = sim.catalog()[0]
            .offerings
            .iter()
            .filter(|o| o.zone == "us-east-1a" && o.capacity_type == "spot")
            .count();
        assert_eq!(spot_in_a, 1);
    }

    #[tokio::test]
    async fn create_takes_the_cheapest_spot_offering_when_spot_is_allowed() {
        let (sim, _) = new_sim();
        let i = sim
            .create(&claim("a", &[spot_or_on_demand()]), &nodeclass(), &none())
            .await
            .expect("launches")
            .instance;
        assert_eq!(launched(&i), offering("m6g.large", "us-east-1c", "spot"));
        assert_eq!(i.price, price_of(&sim, &launched(&i)));

        let amd64 = req("kubernetes.io/arch", api::Operator::In, &["amd64"]);
        let i = sim
            .create(
                &claim("b", &[spot_or_on_demand(), amd64]),
                &nodeclass(),
                &none(),
            )
            .await
            .expect("launches")
            .instance;
        assert_eq!(launched(&i), offering("m5.large", "us-east-1c", "spot"));
    }

    #[tokio::test]
    async fn create_takes_the_cheapest_on_demand_offering_without_spot() {
        let (sim, _) = new_sim();
        let on_demand = capacity(&["on-demand"]);
        let i = sim
            .create(
                &claim("a", std::slice::from_ref(&on_demand)),
                &nodeclass(),
                &none(),
            )
            .await
            .expect("launches")
            .instance;
        // Equal prices in every zone: the first zone wins.
        assert_eq!(
            launched(&i),
            offering("m6g.large", "us-east-1a", "on-demand")
        );
        assert_eq!(i.price, 0.077);

        let zone_b = req(ZONE, api::Operator::In, &["us-east-1b"]);
        let types = req(INSTANCE_TYPE, api::Operator::In, &["m5.large", "c5.large"]);
        let i = sim
            .create(
                &claim("b", &[on_demand, zone_b, types]),
                &nodeclass(),
                &none(),
            )
            .await
            .expect("launches")
            .instance;
        assert_eq!(
            launched(&i),
            offering("c5.large", "us-east-1b", "on-demand")
        );

        // No capacity-type requirement at all: spot is allowed.
        let i = sim
            .create(&claim("c", &[]), &nodeclass(), &none())
            .await
            .expect("launches")
            .instance;
        assert_eq!(i.capacity_type, "spot");
    }

    #[tokio::test]
    async fn create_honours_instance_label_requirements_and_requests() {
        let (sim, _) = new_sim();
        let gpu = req(
            "karpenter.k8s.aws/instance-gpu-count",
            api::Operator::Exists,
            &[],
        );
        let i = sim
            .create(
                &claim("gpu", &[spot_or_on_demand(), gpu]),
                &nodeclass(),
                &none(),
            )
            .await
            .expect("launches")
            .instance;
        assert_eq!(launched(&i), offering("g5.xlarge", "us-east-1a", "spot"));

        // A custom label is the NodePool's to set, not a property of a type.
        let team = req("team", api::Operator::In, &["a"]);
        let cpu4 = req("karpenter.k8s.aws/instance-cpu", api::Operator::Gt, &["2"]);
        let no_gpu = req(
            "karpenter.k8s.aws/instance-gpu-count",
            api::Operator::DoesNotExist,
            &[],
        );
        let i = sim
            .create(
                &claim("big", &[capacity(&["on-demand"]), team, cpu4, no_gpu]),
                &nodeclass(),
                &none(),
            )
            .await
            .expect("launches")
            .instance;
        assert_eq!(
            launched(&i),
            offering("c5.xlarge", "us-east-1a", "on-demand")
        );

        // Requests that only the 4-vCPU types fit.
        let mut c = claim("requests", &[capacity(&["on-demand"])]);
        c.spec.resources = Some(NodeClaimResources {
            requests: Some(BTreeMap::from([("cpu".to_string(), Quantity("3".into()))])),
        });
        let i = sim
            .create(&c, &nodeclass(), &none())
            .await
            .expect("launches")
            .instance;
        assert_eq!(i.instance_type, "c5.xlarge");
    }

    /// An instance has EFA interfaces only for a NodeClaim that requests
    /// EFA, as the AWS launch attaches them; the controller then lists EFA
    /// in the NodeClaim's capacity only for those.
    #[tokio::test]
    async fn efa_is_attached_only_for_a_nodeclaim_that_requests_it() {
        let catalog = SimEc2::builtin_catalog().expect("catalog");
        let (sim, _) = sim_with(SimConfig::new(catalog));
        let efa_type = req(INSTANCE_TYPE, api::Operator::In, &["c7g.16xlarge"]);
        let plain = sim
            .create(
                &claim("plain", &[efa_type.clone(), capacity(&["on-demand"])]),
                &nodeclass(),
                &none(),
            )
            .await
            .expect("launches")
            .instance;
        assert_eq!(plain.instance_type, "c7g.16xlarge");
        assert!(!plain.efa_attached);
        let mut wants = claim("efa", &[efa_type, capacity(&["on-demand"])]);
        wants.spec.resources = Some(NodeClaimResources {
            requests: Some(BTreeMap::from([(
                crate::cloud::aws::launch::EFA.to_string(),
                Quantity("1".into()),
            )])),
        });
        let with = sim
            .create(&wants, &nodeclass(), &none())
            .await
            .expect("launches")
            .instance;
        assert!(with.efa_attached);
    }

    #[tokio::test]
    async fn instance_labels_carry_type_zone_region_capacity_and_nodepool() {
        let (sim, _) = new_sim();
        let i = sim
            .create(
                &claim("a", &[capacity(&["on-demand"])]),
                &nodeclass(),
                &none(),
            )
            .await
            .expect("launches")
            .instance;
        let expected: BTreeMap<String, String> = [
            ("karpenter.k8s.aws/instance-cpu", "2"),
            ("karpenter.k8s.aws/instance-family", "m6g"),
            ("karpenter.sh/capacity-type", "on-demand"),
            ("karpenter.sh/nodepool", "default"),
            ("kubernetes.io/arch", "arm64"),
            ("kubernetes.io/os", "linux"),
            ("node.kubernetes.io/instance-type", "m6g.large"),
            ("topology.kubernetes.io/region", "us-east-1"),
            ("topology.kubernetes.io/zone", "us-east-1a"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(*i.labels, expected);
        assert_eq!(i.nodepool, "default");
        assert_eq!(i.nodeclaim, "a");
    }

    #[tokio::test]
    async fn requirements_that_allow_no_type_are_an_invalid_request() {
        let (sim, _) = new_sim();
        let unknown = req(INSTANCE_TYPE, api::Operator::In, &["m9.huge"]);
        let err = sim
            .create(
                &claim("a", &[spot_or_on_demand(), unknown]),
                &nodeclass(),
                &none(),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, CloudError::InvalidRequest(_)), "{err}");

        // m5.xlarge exists in the catalog but not in the configured zones.
        let absent = req(INSTANCE_TYPE, api::Operator::In, &["m5.xlarge"]);
        let err = sim
            .create(&claim("b", &[absent]), &nodeclass(), &none())
            .await
            .unwrap_err();
        assert!(matches!(err, CloudError::InvalidRequest(_)), "{err}");
        assert!(sim.list().await.expect("lists").is_empty());
    }

    #[tokio::test]
    async fn insufficient_capacity_falls_back_to_the_next_offering() {
        let mut c = config();
        c.insufficient_capacity = vec![window(
            Some("m6g.large"),
            Some("us-east-1c"),
            Some("spot"),
            0,
            None,
        )];
        let (sim, _) = sim_with(c);
        let launched_a = sim
            .create(&claim("a", &[spot_or_on_demand()]), &nodeclass(), &none())
            .await
            .expect("launches");
        assert_eq!(
            launched(&launched_a.instance),
            offering("m6g.large", "us-east-1a", "spot")
        );
        // The cheapest override failed first, and is reported.
        assert_eq!(
            launched_a.refused,
            [offering("m6g.large", "us-east-1c", "spot")]
        );

        // With every spot offering refused, the spot fleet fails; once the
        // caller knows them to be out of capacity, on-demand is next.
        let mut c = config();
        c.insufficient_capacity = vec![window(None, None, Some("spot"), 0, None)];
        let (sim, _) = sim_with(c);
        let err = sim
            .create(&claim("b", &[spot_or_on_demand()]), &nodeclass(), &none())
            .await
            .unwrap_err();
        let CloudError::InsufficientCapacity { offerings } = err else {
            panic!("expected insufficient capacity, got {err}");
        };
        assert_eq!(offerings.len(), 5 * 3);
        assert!(offerings.iter().all(|o| o.capacity_type == "spot"));
        let known: BTreeSet<OfferingKey> = offerings.into_iter().collect();
        let i = sim
            .create(&claim("b", &[spot_or_on_demand()]), &nodeclass(), &known)
            .await
            .expect("launches")
            .instance;
        assert_eq!(
            launched(&i),
            offering("m6g.large", "us-east-1a", "on-demand")
        );
    }

    #[tokio::test]
    async fn insufficient_capacity_lists_the_refused_offerings_until_the_window_ends() {
        let mut c = config();
        c.insufficient_capacity = vec![
            window(Some("c5.large"), None, Some("spot"), 0, Some(600)),
            window(Some("c5.large"), Some("us-east-1b"), None, 0, Some(600)),
        ];
        let (sim, clock) = sim_with(c);
        let only = [
            req(INSTANCE_TYPE, api::Operator::In, &["c5.large"]),
            req(ZONE, api::Operator::In, &["us-east-1a", "us-east-1b"]),
            capacity(&["spot"]),
        ];
        let err = sim
            .create(&claim("a", &only), &nodeclass(), &none())
            .await
            .unwrap_err();
        assert_eq!(
            err,
            CloudError::InsufficientCapacity {
                offerings: vec![
                    offering("c5.large", "us-east-1a", "spot"),
                    offering("c5.large", "us-east-1b", "spot"),
                ]
            }
        );
        // On-demand is allowed too: the spot fleet fails again, then with
        // spot known to be out, on-demand launches in us-east-1a.
        let mut with_od = only.to_vec();
        with_od[2] = spot_or_on_demand();
        assert!(
            sim.create(&claim("b", &with_od), &nodeclass(), &none())
                .await
                .is_err()
        );
        let known: BTreeSet<OfferingKey> = [
            offering("c5.large", "us-east-1a", "spot"),
            offering("c5.large", "us-east-1b", "spot"),
        ]
        .into();
        let i = sim
            .create(&claim("b", &with_od), &nodeclass(), &known)
            .await
            .expect("launches")
            .instance;
        assert_eq!(
            launched(&i),
            offering("c5.large", "us-east-1a", "on-demand")
        );

        clock.set(at(599)).expect("forward");
        assert!(
            sim.create(&claim("c", &only), &nodeclass(), &none())
                .await
                .is_err()
        );
        // The windows end (exclusive): capacity is back.
        clock.set(at(600)).expect("forward");
        let i = sim
            .create(&claim("d", &only), &nodeclass(), &none())
            .await
            .expect("launches")
            .instance;
        assert_eq!(i.instance_type, "c5.large");
        assert_eq!(i.capacity_type, "spot");
    }

    #[test]
    fn a_window_refuses_matching_offerings_from_its_start_until_its_end() {
        let w = window(None, Some("us-east-1a"), Some("spot"), 60, Some(120));
        let spot_a = offering("m5.large", "us-east-1a", "spot");
        assert!(!w.refuses(&spot_a, at(59)));
        assert!(w.refuses(&spot_a, at(60)));
        assert!(w.refuses(&spot_a, at(119)));
        assert!(!w.refuses(&spot_a, at(120)));
        assert!(!w.refuses(&offering("m5.large", "us-east-1b", "spot"), at(60)));
        assert!(!w.refuses(&offering("m5.large", "us-east-1a", "on-demand"), at(60)));
        let open = window(Some("m5.large"), None, None, 0, None);
        assert!(open.refuses(
            &offering("m5.large", "us-east-1c", "on-demand"),
            at(1_000_000)
        ));
        assert!(!open.refuses(&offering("c5.large", "us-east-1c", "on-demand"), at(0)));
    }

    #[tokio::test]
    async fn windows_that_have_not_started_refuse_nothing() {
        let mut c = config();
        c.insufficient_capacity = vec![window(None, None, None, 60, Some(120))];
        let (sim, clock) = sim_with(c);
        assert!(
            sim.create(&claim("a", &[]), &nodeclass(), &none())
                .await
                .is_ok()
        );
        clock.set(at(60)).expect("forward");
        let err = sim
            .create(&claim("b", &[]), &nodeclass(), &none())
            .await
            .unwrap_err();
        let CloudError::InsufficientCapacity { offerings } = err else {
            panic!("expected insufficient capacity, got {err}");
        };
        // The spot fleet's overrides: five types in three zones.
        assert_eq!(offerings.len(), 5 * 3);
    }

    #[tokio::test]
    async fn instances_run_after_the_launch_delay() {
        let (sim, clock) = new_sim();
        let i = sim
            .create(&claim("a", &[]), &nodeclass(), &none())
            .await
            .expect("launches")
            .instance;
        assert_eq!(i.state, InstanceState::Pending);
        assert_eq!(i.launched_at, at(0));
        assert_eq!(sim.running_since(&i), Some(at(45)));

        clock.set(at(44)).expect("forward");
        let got = sim.get(&i.provider_id).await.expect("exists");
        assert_eq!(got.state, InstanceState::Pending);

        clock.set(at(45)).expect("forward");
        let got = sim.get(&i.provider_id).await.expect("exists");
        assert_eq!(got.state, InstanceState::Running);
        let listed = sim.list().await.expect("lists");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].state, InstanceState::Running);
        assert_eq!(listed[0], got);
    }

    #[tokio::test]
    async fn deleted_instances_are_gone() {
        let (sim, _) = new_sim();
        let a = sim
            .create(&claim("a", &[]), &nodeclass(), &none())
            .await
            .expect("launches")
            .instance;
        let b = sim
            .create(&claim("b", &[]), &nodeclass(), &none())
            .await
            .expect("launches")
            .instance;
        sim.delete(&a.provider_id).await.expect("deletes");
        assert_eq!(
            sim.get(&a.provider_id).await.unwrap_err(),
            CloudError::NotFound(a.provider_id.clone())
        );
        assert_eq!(
            sim.delete(&a.provider_id).await.unwrap_err(),
            CloudError::NotFound(a.provider_id.clone())
        );
        let ids: Vec<String> = sim
            .list()
            .await
            .expect("lists")
            .into_iter()
            .map(|i| i.id)
            .collect();
        assert_eq!(ids, [b.id.as_str()]);

        // A provider id naming the wrong zone, or no instance, is not found.
        let wrong_zone = b.provider_id.replace(&b.zone, "us-east-1z");
        assert!(matches!(
            sim.get(&wrong_zone).await,
            Err(CloudError::NotFound(_))
        ));
        assert!(matches!(sim.get("").await, Err(CloudError::NotFound(_))));
    }

    #[tokio::test]
    async fn ids_and_launches_are_deterministic() {
        async fn run() -> Vec<Instance> {
            let (sim, clock) = new_sim();
            let mut out = Vec::new();
            for (n, reqs) in [
                vec![],
                vec![capacity(&["on-demand"])],
                vec![spot_or_on_demand()],
            ]
            .into_iter()
            .enumerate()
            {
                clock.set(at(10 * n as u64)).expect("forward");
                out.push(
                    sim.create(&claim(&format!("c{n}"), &reqs), &nodeclass(), &none())
                        .await
                        .expect("launches")
                        .instance,
                );
            }
            out
        }
        let first = run().await;
        assert_eq!(first, run().await);
        let ids: Vec<&str> = first.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "i-00000000000000001",
                "i-00000000000000002",
                "i-00000000000000003"
            ]
        );
        assert_eq!(
            first[0].provider_id,
            "aws:///us-east-1c/i-00000000000000001"
        );
    }

    #[tokio::test]
    async fn terminate_externally_removes_the_instance() {
        let (sim, _) = new_sim();
        let i = sim
            .create(&claim("a", &[]), &nodeclass(), &none())
            .await
            .expect("launches")
            .instance;
        sim.terminate_externally(&i.id, "spot reclaim")
            .expect("terminates");
        assert!(matches!(
            sim.get(&i.provider_id).await,
            Err(CloudError::NotFound(_))
        ));
        assert_eq!(
            sim.terminate_externally(&i.id, "again"),
            Err(CloudError::NotFound(i.id.clone()))
        );
        let last = sim.calls().pop().expect("recorded");
        assert_eq!(
            last.call,
            Call::TerminateExternally {
                instance_id: i.id.clone(),
                reason: "again".into(),
                result: Err(CloudError::NotFound(i.id.clone())),
            }
        );
    }

    #[tokio::test]
    async fn a_spot_interruption_reclaims_the_instance_two_minutes_after_the_warning() {
        use crate::interruption::{Detail, Kind, Parsed, parse};
        let (sim, clock) = new_sim();
        let spot = sim
            .create(&claim("a", &[spot_or_on_demand()]), &nodeclass(), &none())
            .await
            .expect("launches")
            .instance;
        let on_demand = sim
            .create(
                &claim("b", &[capacity(&["on-demand"])]),
                &nodeclass(),
                &none(),
            )
            .await
            .expect("launches")
            .instance;
        assert_eq!(spot.capacity_type, "spot");
        // EC2 interrupts only spot instances, and knows its instances.
        assert!(matches!(
            sim.interrupt(
                Kind::SpotInterruption,
                std::slice::from_ref(&on_demand.id),
                None
            ),
            Err(CloudError::InvalidRequest(_))
        ));
        assert_eq!(
            sim.interrupt(Kind::Rebalance, &["i-00000000000000fff".to_string()], None),
            Err(CloudError::NotFound("i-00000000000000fff".into()))
        );
        assert_eq!(sim.next_reclaim(), None);

        clock.set(at(10)).expect("forward");
        let bodies = sim
            .interrupt(Kind::SpotInterruption, std::slice::from_ref(&spot.id), None)
            .expect("sent");
        let [body] = bodies.as_slice() else {
            panic!("one event per instance: {bodies:?}");
        };
        let Ok(Parsed::Message(m)) = parse(body) else {
            panic!("the event parses: {body}");
        };
        assert_eq!(m.kind(), Kind::SpotInterruption);
        assert!(
            matches!(&m.detail, Detail::SpotInterruption { instance_id, .. } if *instance_id == spot.id)
        );
        assert_eq!(m.time, at(10));
        assert_eq!(sim.next_reclaim(), Some(at(130)));

        clock.set(at(129)).expect("forward");
        assert!(sim.take_reclaimed().is_empty());
        assert!(sim.get(&spot.provider_id).await.is_ok());
        clock.set(at(200)).expect("forward");
        // Reclaimed at its own time, whenever it is next looked at.
        let listed = sim.list().await.expect("lists");
        assert_eq!(listed.len(), 1);
        assert_eq!(sim.take_reclaimed(), vec![(at(130), spot.id.clone())]);
        assert!(sim.take_reclaimed().is_empty());
        assert_eq!(sim.next_reclaim(), None);
        assert!(sim.calls().iter().any(|c| c.at == at(130)
            && c.call
                == Call::TerminateExternally {
                    instance_id: spot.id.clone(),
                    reason: "spot reclaim".into(),
                    result: Ok(()),
                }));
    }

    #[tokio::test]
    async fn other_events_leave_instances_running_except_a_state_change() {
        use crate::interruption::{InstanceState, Kind, Parsed, parse};
        let (sim, _) = new_sim();
        let mut ids = Vec::new();
        for name in ["a", "b"] {
            ids.push(
                sim.create(&claim(name, &[]), &nodeclass(), &none())
                    .await
                    .expect("launches")
                    .instance
                    .id,
            );
        }
        let rebalance = sim.interrupt(Kind::Rebalance, &ids, None).expect("sent");
        assert_eq!(rebalance.len(), 2);
        let health = sim
            .interrupt(Kind::ScheduledChange, &ids, None)
            .expect("sent");
        let [health] = health.as_slice() else {
            panic!("one AWS Health event for every instance");
        };
        let Ok(Parsed::Message(m)) = parse(health) else {
            panic!("the event parses");
        };
        assert_eq!(m.detail.instance_ids(), ids.as_slice());
        assert_eq!(sim.list().await.expect("lists").len(), 2);
        assert_eq!(sim.next_reclaim(), None);

        let stopped = sim
            .interrupt(Kind::StateChange, &ids[..1], Some(InstanceState::Stopped))
            .expect("sent");
        assert_eq!(stopped.len(), 1);
        let listed = sim.list().await.expect("lists");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, ids[1]);
    }

    #[tokio::test]
    async fn instance_types_apply_kubelet_settings_nodepool_requirements_and_windows() {
        let mut c = config();
        c.insufficient_capacity = vec![window(Some("c5.large"), Some("us-east-1b"), None, 0, None)];
        let (sim, _) = sim_with(c);
        let mut class = nodeclass();
        class.spec.kubelet = Some(KubeletConfiguration {
            max_pods: Some(110),
            ..KubeletConfiguration::default()
        });
        let pool = NodePool::test("default").with_requirement(req(
            "kubernetes.io/arch",
            api::Operator::In,
            &["amd64"],
        ));
        let types = sim.instance_types(&pool, &class).await.expect("lists");
        let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["m5.large", "c5.large", "c5.xlarge", "g5.xlarge"]);
        assert!(types.iter().all(|t| t.allocatable.get("pods") == 110));
        // A capacity window hides nothing ahead of a launch: EC2 lists the
        // offering and fails the launch.
        assert!(
            types
                .iter()
                .all(|t| t.offerings.iter().all(|o| o.available))
        );

        // Without kubelet settings, the catalog's allocatable is kept; a
        // template label that is not an instance property filters nothing.
        let mut pool = NodePool::test("default");
        pool.spec.template.metadata = Some(NodeClaimTemplateMetadata {
            labels: Some(BTreeMap::from([("team".to_string(), "a".to_string())])),
            ..NodeClaimTemplateMetadata::default()
        });
        let types = sim
            .instance_types(&pool, &nodeclass())
            .await
            .expect("lists");
        assert_eq!(types.len(), 5);
        assert_eq!(types[0].allocatable.get("pods"), 29);
    }

    #[tokio::test]
    async fn kubelet_max_pods_limits_what_a_launch_can_fit() {
        let (sim, _) = new_sim();
        let mut class = nodeclass();
        class.spec.kubelet = Some(KubeletConfiguration {
            max_pods: Some(8),
            ..KubeletConfiguration::default()
        });
        let mut c = claim("a", &[]);
        c.spec.resources = Some(NodeClaimResources {
            requests: Some(BTreeMap::from([(
                "pods".to_string(),
                Quantity("10".into()),
            )])),
        });
        let err = sim.create(&c, &class, &none()).await.unwrap_err();
        assert!(matches!(err, CloudError::InvalidRequest(_)), "{err}");
        assert!(sim.create(&c, &nodeclass(), &none()).await.is_ok());
    }

    #[tokio::test]
    async fn the_call_log_records_every_call_and_injected_errors() {
        let (sim, clock) = new_sim();
        let i = sim
            .create(&claim("a", &[]), &nodeclass(), &none())
            .await
            .expect("launches")
            .instance;
        clock.set(at(5)).expect("forward");
        sim.fail_next(CloudError::Api("throttled".into()));
        assert_eq!(
            sim.get(&i.provider_id).await.unwrap_err(),
            CloudError::Api("throttled".into())
        );
        // The injected error is used once.
        assert_eq!(
            sim.get(&i.provider_id).await.expect("exists").state,
            InstanceState::Pending
        );
        sim.list().await.expect("lists");
        sim.instance_types(&NodePool::test("default"), &nodeclass())
            .await
            .expect("lists");
        clock.set(at(50)).expect("forward");
        sim.delete(&i.provider_id).await.expect("deletes");

        let launch = Launch {
            instance_id: i.id.clone(),
            offering: launched(&i),
            price: i.price,
            refused: Vec::new(),
        };
        let pid = i.provider_id.clone();
        let expected = vec![
            CallRecord {
                at: at(0),
                call: Call::Create {
                    nodeclaim: "a".into(),
                    result: Ok(launch),
                },
            },
            CallRecord {
                at: at(5),
                call: Call::Get {
                    provider_id: pid.clone(),
                    result: Err(CloudError::Api("throttled".into())),
                },
            },
            CallRecord {
                at: at(5),
                call: Call::Get {
                    provider_id: pid.clone(),
                    result: Ok(InstanceState::Pending),
                },
            },
            CallRecord {
                at: at(5),
                call: Call::List { result: Ok(1) },
            },
            CallRecord {
                at: at(5),
                call: Call::InstanceTypes {
                    nodepool: "default".into(),
                    nodeclass: "default".into(),
                    result: Ok(5),
                },
            },
            CallRecord {
                at: at(50),
                call: Call::Delete {
                    provider_id: pid,
                    result: Ok(()),
                },
            },
        ];
        assert_eq!(sim.calls(), expected);
        let methods: Vec<&str> = sim.calls().iter().map(|c| c.call.method()).collect();
        assert_eq!(
            methods,
            ["create", "get", "get", "list", "instance_types", "delete"]
        );

        // A failed create is logged with its error.
        let bad = req(INSTANCE_TYPE, api::Operator::In, &["m9.huge"]);
        let err = sim
            .create(&claim("b", &[bad]), &nodeclass(), &none())
            .await
            .unwrap_err();
        let last = sim.calls().pop().expect("recorded");
        assert_eq!(
            last.call,
            Call::Create {
                nodeclaim: "b".into(),
                result: Err(err)
            }
        );
    }

    /// The shared data directory: beside the repository, or in an ancestor
    /// of it (worktrees live elsewhere).
    fn shared_catalog() -> PathBuf {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let beside = manifest.join("../shared/data/aws-catalog.json");
        if beside.is_file() {
            return beside;
        }
        manifest
            .ancestors()
            .map(|dir| dir.join("shared/data/aws-catalog.json"))
            .find(|p| p.is_file())
            .unwrap_or(beside)
    }

    #[tokio::test]
    async fn the_full_shared_catalog_loads_and_launches() {
        let path = shared_catalog();
        let catalog = SimEc2::load_catalog(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        assert_eq!(catalog.len(), 1345);
        let clock = ManualClock::new(ts(START));
        let sim = SimEc2::new(SimConfig::new(catalog), Arc::new(clock));
        assert_eq!(sim.catalog().len(), 1345);
        assert!(sim.catalog().iter().all(|it| it.offerings.len() == 6));
        let gpu = sim
            .catalog()
            .iter()
            .find(|it| is_accelerated(it))
            .expect("the catalog has GPU types");
        let od = price_of(&sim, &offering(&gpu.name, "us-east-1a", "on-demand"));
        let spot = price_of(&sim, &offering(&gpu.name, "us-east-1a", "spot"));
        assert!((0.40 - 1e-9..=0.55 + 1e-9).contains(&(spot / od)));

        let i = sim
            .create(
                &claim("a", &[capacity(&["on-demand"])]),
                &nodeclass(),
                &none(),
            )
            .await
            .expect("launches")
            .instance;
        let cheapest = sim
            .catalog()
            .iter()
            .flat_map(|it| &it.offerings)
            .filter(|o| o.capacity_type == "on-demand")
            .map(|o| o.price)
            .fold(f64::INFINITY, f64::min);
        assert_eq!(i.price, cheapest);
        let types = sim
            .instance_types(&NodePool::test("default"), &nodeclass())
            .await
            .expect("lists");
        assert_eq!(types.len(), 1345);
    }
}
