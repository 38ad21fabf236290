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
//!   `<instance type>/<zone>` (e.g. `m7i.large/us-east-1a`);
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
//! [`CloudProvider::create`] chooses like EC2 Fleet as Karpenter drives it:
//! among the offerings the NodeClaim's requirements allow (instance type,
//! zone, capacity type and the other instance labels) whose type fits the
//! NodeClaim's resource requests, and which are available and outside every
//! active insufficient-capacity window, it takes the cheapest spot offering
//! if there is one, otherwise the cheapest offering of another capacity type
//! (on-demand). Ties go to the instance type name, then the zone.
//!
//! # Lifecycle
//!
//! An instance is `Pending` from its launch until `launch_delay` has passed,
//! then `Running` ([`SimEc2::running_since`]). Termination, by
//! [`CloudProvider::delete`] or [`SimEc2::terminate_externally`], passes
//! through `ShuttingDown` to `Terminated` instantly: the instance is gone at
//! once, and later `get`s and `delete`s of it are `NotFound`.

use std::collections::BTreeMap;
use std::future::{Future, ready};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{CloudError, CloudProvider, Instance, InstanceState, OfferingKey};
use crate::api::{self, EC2NodeClass, NodeClaim, NodePool, NodeSelectorRequirementWithMinValues};
use crate::clock::{Clock, Timestamp};
use crate::model::catalog::{CatalogError, parse_catalog, read_catalog};
use crate::model::labels::{CAPACITY_TYPE, INSTANCE_TYPE, NODEPOOL, REGION, ZONE, is_well_known};
use crate::model::requirements::RequirementError;
use crate::model::{
    InstanceType, KubeletSettings, Offering, Operator, Requirement, Requirements, Resources,
};
use crate::plan::kubelet_settings;

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

/// Labels of instance-type properties. A type that does not carry one of
/// them lacks the property (no GPU, no local NVMe), so a requirement on it
/// is checked as against an absent label.
const INSTANCE_PROPERTY_PREFIX: &str = "karpenter.k8s.aws/instance-";
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
        let matches =
            |filter: &Option<String>, value: &str| filter.as_deref().is_none_or(|f| f == value);
        self.from <= now
            && self.until.is_none_or(|until| now < until)
            && matches(&self.instance_type, &offering.instance_type)
            && matches(&self.zone, &offering.zone)
            && matches(&self.capacity_type, &offering.capacity_type)
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
    /// Whether spot offerings exist.
    pub spot: bool,
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
            spot: true,
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
    next_error: Option<CloudError>,
}

/// The simulated EC2. See the module documentation.
pub struct SimEc2 {
    /// The prepared catalog: offerings in the configured zones, spot added.
    catalog: Vec<InstanceType>,
    region: String,
    launch_delay: Duration,
    windows: Vec<CapacityWindow>,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
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
            spot,
        } = config;
        let catalog = catalog
            .into_iter()
            .filter_map(|it| prepare(it, &region, &zones, spot))
            .collect();
        SimEc2 {
            catalog,
            region,
            launch_delay,
            windows: insufficient_capacity,
            clock,
            state: Mutex::new(State::default()),
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

    /// Terminates an instance without the controller asking, as EC2 does
    /// when it reclaims spot capacity; `reason` goes into the call log.
    /// Unknown or already terminated instances are `NotFound`.
    pub fn terminate_externally(&self, instance_id: &str, reason: &str) -> Result<(), CloudError> {
        let now = self.clock.now();
        let mut state = self.lock();
        let result = match state.instances.remove(instance_id) {
            Some(_) => Ok(()),
            None => Err(CloudError::NotFound(instance_id.to_string())),
        };
        state.calls.push(CallRecord {
            at: now,
            call: Call::TerminateExternally {
                instance_id: instance_id.to_string(),
                reason: reason.to_string(),
                result: result.clone(),
            },
        });
        result
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
        let result = match state.next_error.take() {
            Some(error) => Err(error),
            None => op(&mut state, now),
        };
        let call = record(&result);
        state.calls.push(CallRecord { at: now, call });
        result
    }

    /// An instance as it is at `now`.
    fn observe(&self, instance: &Instance, now: Timestamp) -> Instance {
        let mut out = instance.clone();
        if self.running_since(instance).is_some_and(|t| t <= now) {
            out.state = InstanceState::Running;
        }
        out
    }

    fn refused(&self, offering: &OfferingKey, now: Timestamp) -> bool {
        self.windows.iter().any(|w| w.refuses(offering, now))
    }

    fn launch(
        &self,
        state: &mut State,
        now: Timestamp,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
    ) -> Result<Instance, CloudError> {
        let requirements = requirements_of(&claim.spec.requirements)
            .map_err(|e| CloudError::InvalidRequest(format!("spec.requirements: {e}")))?;
        let requests = claim_requests(claim)?;
        let kubelet = nodeclass_kubelet(nodeclass)?;
        let constraints = instance_constraints(&requirements);
        let allows = |key: &str, value: &str| requirements.get(key).is_none_or(|r| r.has(value));

        // Every offering the NodeClaim allows, with whether it can launch now.
        let mut allowed: Vec<(OfferingKey, f64, bool, &InstanceType)> = Vec::new();
        for it in &self.catalog {
            if !type_allowed(it, &constraints)
                || (!requests.is_zero()
                    && !requests.fits_in(&it.for_node_class(&kubelet).allocatable))
            {
                continue;
            }
            for o in &it.offerings {
                if allows(ZONE, &o.zone) && allows(CAPACITY_TYPE, &o.capacity_type) {
                    let key = offering_key(it, o);
                    let launchable = o.available && !self.refused(&key, now);
                    allowed.push((key, o.price, launchable, it));
                }
            }
        }
        if allowed.is_empty() {
            return Err(CloudError::InvalidRequest(
                "no offering of any instance type satisfies the NodeClaim's requirements and resource requests"
                    .to_string(),
            ));
        }
        let cheapest = |spot: bool| {
            allowed
                .iter()
                .filter(|(key, _, launchable, _)| {
                    *launchable && (key.capacity_type == api::CAPACITY_TYPE_SPOT) == spot
                })
                .min_by(|a, b| {
                    a.1.total_cmp(&b.1)
                        .then_with(|| a.0.instance_type.cmp(&b.0.instance_type))
                        .then_with(|| a.0.zone.cmp(&b.0.zone))
                        .then_with(|| a.0.capacity_type.cmp(&b.0.capacity_type))
                })
        };
        let Some((key, price, _, it)) = cheapest(true).or_else(|| cheapest(false)) else {
            let mut offerings: Vec<OfferingKey> = allowed.into_iter().map(|a| a.0).collect();
            offerings.sort();
            return Err(CloudError::InsufficientCapacity { offerings });
        };

        state.last_id += 1;
        let id = format!("i-{:017x}", state.last_id);
        let nodepool = claim.nodepool_name().unwrap_or_default().to_string();
        let mut labels: BTreeMap<String, String> = it
            .requirements
            .labels()
            .into_iter()
            .filter(|(k, _)| is_well_known(k))
            .collect();
        labels.insert(ZONE.to_string(), key.zone.clone());
        labels.insert(REGION.to_string(), self.region.clone());
        labels.insert(CAPACITY_TYPE.to_string(), key.capacity_type.clone());
        labels.insert(INSTANCE_TYPE.to_string(), key.instance_type.clone());
        if !nodepool.is_empty() {
            labels.insert(NODEPOOL.to_string(), nodepool.clone());
        }
        let instance = Instance {
            provider_id: format!("aws:///{}/{id}", key.zone),
            id: id.clone(),
            instance_type: key.instance_type.clone(),
            zone: key.zone.clone(),
            capacity_type: key.capacity_type.clone(),
            price: *price,
            launched_at: now,
            state: InstanceState::Pending,
            nodeclaim: claim.metadata.name.clone().unwrap_or_default(),
            nodepool,
            labels,
        };
        state.instances.insert(id, instance.clone());
        Ok(self.observe(&instance, now))
    }

    fn instance_types_now(
        &self,
        now: Timestamp,
        nodepool: &NodePool,
        nodeclass: &EC2NodeClass,
    ) -> Result<Vec<InstanceType>, CloudError> {
        let mut requirements = requirements_of(nodepool.requirements()).map_err(|e| {
            CloudError::InvalidRequest(format!("spec.template.spec.requirements: {e}"))
        })?;
        let template_labels = nodepool
            .spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref());
        for (k, v) in template_labels.into_iter().flatten() {
            requirements.add(k, Requirement::in_values([v.clone()]));
        }
        let constraints = instance_constraints(&requirements);
        let kubelet = nodeclass_kubelet(nodeclass)?;
        Ok(self
            .catalog
            .iter()
            .filter(|it| type_allowed(it, &constraints))
            .map(|it| {
                let mut it = it.for_node_class(&kubelet);
                for i in 0..it.offerings.len() {
                    let key = offering_key(&it, &it.offerings[i]);
                    if self.refused(&key, now) {
                        it.offerings[i].available = false;
                    }
                }
                it
            })
            .collect())
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
    ) -> impl Future<Output = Result<Instance, CloudError>> + Send {
        let nodeclaim = claim.metadata.name.clone().unwrap_or_default();
        ready(self.call(
            |state, now| self.launch(state, now, claim, nodeclass),
            |result| {
                Call::Create {
                    nodeclaim,
                    result: result
                        .as_ref()
                        .map(|i| Launch {
                            instance_id: i.id.clone(),
                            offering: OfferingKey {
                                instance_type: i.instance_type.clone(),
                                zone: i.zone.clone(),
                                capacity_type: i.capacity_type.clone(),
                            },
                            price: i.price,
                        })
                        .map_err(Clone::clone),
                }
            },
        ))
    }

    fn delete(&self, provider_id: &str) -> impl Future<Output = Result<(), CloudError>> + Send {
        ready(self.call(
            |state, _| {
                let id = find(state, provider_id)?.id.clone();
                state.instances.remove(&id);
                Ok(())
            },
            |result| Call::Delete {
                provider_id: provider_id.to_string(),
                result: result.clone(),
            },
        ))
    }

    fn get(&self, provider_id: &str) -> impl Future<Output = Result<Instance, CloudError>> + Send {
        ready(self.call(
            |state, now| find(state, provider_id).map(|i| self.observe(i, now)),
            |result| Call::Get {
                provider_id: provider_id.to_string(),
                result: result.as_ref().map(|i| i.state).map_err(Clone::clone),
            },
        ))
    }

    fn list(&self) -> impl Future<Output = Result<Vec<Instance>, CloudError>> + Send {
        ready(self.call(
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
        ))
    }

    fn instance_types(
        &self,
        nodepool: &NodePool,
        nodeclass: &EC2NodeClass,
    ) -> impl Future<Output = Result<Vec<InstanceType>, CloudError>> + Send {
        ready(self.call(
            |_, now| self.instance_types_now(now, nodepool, nodeclass),
            |result| Call::InstanceTypes {
                nodepool: nodepool.metadata.name.clone().unwrap_or_default(),
                nodeclass: nodeclass.metadata.name.clone().unwrap_or_default(),
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
    let h = fnv1a64(
        instance_type
            .bytes()
            .chain(std::iter::once(b'/'))
            .chain(zone.bytes()),
    );
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

fn offering_key(it: &InstanceType, o: &Offering) -> OfferingKey {
    OfferingKey {
        instance_type: it.name.clone(),
        zone: o.zone.clone(),
        capacity_type: o.capacity_type.clone(),
    }
}

/// The model's requirements of an API requirement list.
fn requirements_of(
    list: &[NodeSelectorRequirementWithMinValues],
) -> Result<Requirements, RequirementError> {
    let mut out = Requirements::new();
    for r in list {
        let op = match r.operator {
            api::Operator::In => Operator::In,
            api::Operator::NotIn => Operator::NotIn,
            api::Operator::Exists => Operator::Exists,
            api::Operator::DoesNotExist => Operator::DoesNotExist,
            api::Operator::Gt => Operator::Gt,
            api::Operator::Lt => Operator::Lt,
            api::Operator::Gte => Operator::Gte,
            api::Operator::Lte => Operator::Lte,
        };
        out.add(&r.key, Requirement::new(&r.key, op, r.values())?);
    }
    Ok(out)
}

/// The requirements that constrain instance types: those on well-known
/// labels. Other labels (custom ones, the NodePool name's) are put on the
/// node from the NodeClaim, whatever the instance type.
fn instance_constraints(requirements: &Requirements) -> Requirements {
    Requirements(
        requirements
            .0
            .iter()
            .filter(|(k, _)| is_well_known(k))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect(),
    )
}

/// Does the instance type satisfy the constraints? A constraint on an
/// instance property the type lacks must allow the label to be absent;
/// other well-known labels it does not define (the NodePool's) do not
/// constrain it.
fn type_allowed(it: &InstanceType, constraints: &Requirements) -> bool {
    it.requirements
        .compatible(constraints, |key| {
            is_well_known(key) && !key.starts_with(INSTANCE_PROPERTY_PREFIX)
        })
        .is_ok()
}

/// The NodeClaim's resource requests.
fn claim_requests(claim: &NodeClaim) -> Result<Resources, CloudError> {
    match claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
    {
        Some(requests) => Resources::from_k8s(requests).map_err(|(name, e)| {
            CloudError::InvalidRequest(format!("spec.resources.requests.{name}: {e}"))
        }),
        None => Ok(Resources::new()),
    }
}

/// The kubelet settings of the node class.
fn nodeclass_kubelet(nodeclass: &EC2NodeClass) -> Result<KubeletSettings, CloudError> {
    let not_ready = |reason: String| CloudError::NodeClassNotReady {
        name: nodeclass.metadata.name.clone().unwrap_or_default(),
        reason,
    };
    let doc = serde_json::to_value(nodeclass).map_err(|e| not_ready(e.to_string()))?;
    kubelet_settings(&doc).map_err(not_ready)
}
