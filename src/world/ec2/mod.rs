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
//! How the catalog becomes the offerings and their spot prices is told in
//! `offerings.rs`; how a launch chooses its offering, in `launch.rs`.
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

mod launch;
pub mod nodeclass;
mod offerings;
pub mod reservations;

pub use self::offerings::spot_factor;
use self::offerings::{fmix64, fnv1a64, prepare};

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
use crate::model::labels::{CAPACITY_TYPE, ZONE, is_well_known};
use crate::model::{InstanceType, KubeletSettings, Offering};

/// The account id in the simulated EC2's event JSON and ARNs.
pub const SIM_ACCOUNT: &str = "111122223333";
/// How long after a spot interruption warning EC2 reclaims the instance.
pub const SPOT_RECLAIM_NOTICE: Duration = Duration::from_secs(120);

/// The region of the simulated EC2 unless configured otherwise.
pub const DEFAULT_REGION: &str = "us-east-1";
/// RunInstances to node registration, unless configured otherwise.
pub const DEFAULT_LAUNCH_DELAY: Duration = Duration::from_secs(45);

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
    /// Whether every call is kept for [`SimEc2::calls`] (tests read them);
    /// off for a simulation, which only counts them, and for a provider
    /// that runs for days.
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
    /// Live instances by id, stored with state `Pending` until a view
    /// ([`SimEc2::instances_now`]) finds them running; fixed-width hex ids
    /// make this id order also launch order.
    instances: BTreeMap<String, Arc<Instance>>,
    calls: Vec<CallRecord>,
    /// Whether calls are kept ([`SimConfig::call_log`]).
    call_log: bool,
    /// How many calls were made, kept or not.
    call_count: usize,
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
    view: Option<(u64, Option<Timestamp>, InstanceView)>,
}

impl State {
    /// Counts a call, and keeps it for [`SimEc2::calls`] if calls are kept.
    fn log(&mut self, record: CallRecord) {
        self.call_count += 1;
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

/// The instances as the simulated EC2 has them at one moment, shared: an
/// instance that did not change since the last view is the same allocation.
pub type InstanceView = Arc<Vec<Arc<Instance>>>;

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

    /// Every call so far, in order (none unless [`SimConfig::call_log`]).
    pub fn calls(&self) -> Vec<CallRecord> {
        self.lock().calls.clone()
    }

    /// How many calls were made so far, whether or not they are kept.
    pub fn call_count(&self) -> usize {
        self.lock().call_count
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
        state.instances.insert(id, Arc::new(instance));
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
    pub fn instances_now(&self) -> InstanceView {
        let now = self.clock.now();
        let mut state = self.lock();
        self.settle(&mut state, now);
        if let Some((generation, until, view)) = &state.view
            && *generation == state.generation
            && until.is_none_or(|t| now < t)
        {
            return view.clone();
        }
        // An instance that has started running is stored so (as `observe`
        // would show it): the next views share it until it changes.
        let view: InstanceView = Arc::new(
            state
                .instances
                .values_mut()
                .map(|i| {
                    if i.state != InstanceState::Running
                        && self.running_since(i).is_some_and(|t| t <= now)
                    {
                        Arc::make_mut(i).state = InstanceState::Running;
                    }
                    Arc::clone(i)
                })
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
                let i = Arc::make_mut(i);
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
    /// [`SimEc2::observe`], the stored instance itself when it shows as
    /// stored.
    fn observed(&self, instance: &Arc<Instance>, now: Timestamp) -> Arc<Instance> {
        match instance.state != InstanceState::Running
            && self.running_since(instance).is_some_and(|t| t <= now)
        {
            true => Arc::new(self.observe(instance, now)),
            false => Arc::clone(instance),
        }
    }

    fn observe(&self, instance: &Instance, now: Timestamp) -> Instance {
        let mut out = instance.clone();
        if self.running_since(instance).is_some_and(|t| t <= now) {
            out.state = InstanceState::Running;
        }
        out
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
        .map(|i| &**i)
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

    fn list(&self) -> impl Future<Output = Result<Vec<Arc<Instance>>, CloudError>> + Send {
        let result = self.call(
            |state, now| {
                Ok(state
                    .instances
                    .values()
                    .map(|i| self.observed(i, now))
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

/// The kubelet settings of the node class.
fn nodeclass_kubelet(nodeclass: &EC2NodeClass) -> Result<KubeletSettings, CloudError> {
    let not_ready = |reason: String| CloudError::NodeClassNotReady {
        name: nodeclass.metadata.name.clone().unwrap_or_default(),
        reason,
    };
    kubelet_settings(nodeclass).map_err(not_ready)
}

#[cfg(test)]
mod tests;
