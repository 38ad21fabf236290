//! The AWS cloud provider: [`AwsProvider`] implements [`CloudProvider`]
//! with EC2, SSM and the Pricing API (aws-sdk-ec2, aws-sdk-ssm,
//! aws-sdk-pricing).
//!
//! - **Instance types** ([`instance_types`]): DescribeInstanceTypes and
//!   DescribeInstanceTypeOfferings (by zone), kept for
//!   [`AwsConfig::instance_types_ttl`]; prices ([`pricing`]) for their own
//!   TTLs. Per node class (its kubelet settings, AMI family, block devices,
//!   and the zones of its subnets) the types are computed once per data
//!   refresh and cached. An offering without a price is not listed.
//! - **Node classes** ([`nodeclass`]): [`CloudProvider::resolve_node_class`]
//!   resolves subnets, security groups and images afresh; launches use the
//!   node class's status when it reports all three, else a resolution
//!   cached for [`AwsConfig::resolution_ttl`].
//! - **Launches** ([`launch`]): a launch template per distinct template
//!   input, created on first use and reused, then CreateFleet. Launches
//!   with identical plans that arrive within
//!   [`AwsConfig::launch_batch_idle`] of each other (at most
//!   [`AwsConfig::launch_batch_max`] in all) share one CreateFleet call
//!   asking for as many instances; then each instance is tagged with its
//!   NodeClaim (a lone launch carries the tag from the start). Callers must
//!   launch concurrently to benefit; a lone launch waits the idle window
//!   (35 ms by default) first.
//! - **Subnets** ([`subnets`]): each zone's subnet for a launch is chosen
//!   with the launches in flight counted against the free addresses the
//!   last DescribeSubnets reported, and given back after CreateFleet.
//! - **Cluster** ([`AwsProvider::discover_cluster`]): the endpoint, CA and
//!   service CIDR nodes join with, from `eks:DescribeCluster` where the
//!   configuration lacks them.
//! - **Instances** ([`instances`]): `list` is DescribeInstances filtered by
//!   the cluster tag and `karpenter.sh/nodepool`; `get` and `delete` go by
//!   instance id; [`CloudProvider::is_drifted`] reads a list kept for
//!   [`AwsConfig::instance_cache_ttl`], so one DescribeInstances serves a
//!   whole drift pass.
//! - **Errors** ([`error`]): throttling is retried with backoff and jitter;
//!   access denied names the IAM action ([`iam::ACTIONS`] lists them all,
//!   `deploy/iam-policy.json` grants them).
//! - **Capacity reservations** ([`reservations`]): resolved with the node
//!   class (DescribeCapacityReservations), offered as `reserved`
//!   offerings while instances are left in them, launched into with a
//!   launch template that targets them.
//! - **Launch templates** are deleted by
//!   [`AwsProvider::cleanup_launch_templates`] once their node class is gone
//!   or no longer resolves to their image.
//!
//! Also: the EKS SDK for cluster discovery (`config`, which also reads the
//! cluster DNS IP from the `kube-dns` Service), the IAM SDK for instance
//! profiles (`instanceprofile`), `validation` (`ValidationSucceeded`, its
//! decisions cached for 30 minutes), `placement` (placement groups), and
//! `credentials` (credentials that load again after `ExpiredToken`).
//! `instance_types`, `launch` and `subnets` are pure (values, no calls), as is
//! the validation decision. Configuration and setup: `docs/aws.md`. The
//! provider depends on `api`, `model`, `clock`, `drift` and `cloud`, never on
//! `controller` or `cli`.

pub mod background;
pub mod config;
pub mod credentials;
pub mod error;
pub mod iam;
pub mod instance_types;
pub mod instanceprofile;
pub mod instances;
pub mod launch;
pub mod nodeclass;
pub mod placement;
pub mod pricing;
pub mod reservations;
pub mod subnets;
pub mod validation;

pub use background::{Background, Registered, VersionSource};
pub use config::{AwsConfig, ClusterAccess, kubernetes_version};
pub use error::{AwsError, RetrySettings};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use aws_config::SdkConfig;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, Filter, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, OnDemandOptionsRequest, ResourceType,
    SpotAllocationStrategy, SpotOptionsRequest, Tag, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use self::error::{call, paginate};
use self::instance_types::{Family, NodeClassSettings, Overheads, TypeInfo};
use self::launch::{
    ClusterInfo, FleetInstance, LaunchPlan, PlanInput, TAG_IMAGE, TAG_LAUNCH_BATCH, TAG_NODECLAIM,
    TAG_NODECLASS, TAG_VALUE_MAX, cluster_tag,
};
use self::pricing::{OnDemandPrices, SpotPrices};
use super::select::{
    NodeClassNeeds, image_for, instance_labels, nodepool_constraints, type_allowed,
};
use super::{
    CloudError, CloudProvider, Instance, InstanceState, Launched, NodeClassCondition,
    NodeClassProblem, NodeClassResolution, OfferingKey, instance_drift, reasons,
};
use crate::api::ec2nodeclass::CapacityReservation;
use crate::api::{EC2NodeClass, NodeClaim, NodePool};
use crate::clock::{Clock, Timestamp};
use crate::drift::DriftReason;
use crate::model::labels::{CAPACITY_TYPE, INSTANCE_TYPE, ZONE};
use crate::model::{InstanceType, Offering, Requirement};

/// Instance states `list` reports (terminated instances are gone).
const LIVE_STATES: [&str; 5] = ["pending", "running", "stopping", "stopped", "shutting-down"];

/// How long a resolved placement group is used before EC2 is asked again.
const PLACEMENT_GROUP_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// The instance types, their zones and prices, as last read.
#[derive(Default)]
struct Catalog {
    types: Arc<Vec<TypeInfo>>,
    /// Instance type -> the zones that offer it.
    zones: Arc<BTreeMap<String, BTreeSet<String>>>,
    types_at: Option<Instant>,
    /// The built-in prices, the price file's over them, the Pricing API's
    /// over both.
    on_demand: Arc<OnDemandPrices>,
    /// Whether `on_demand` holds at least the built-in and file prices.
    on_demand_loaded: bool,
    /// When the Pricing API is next asked (`None`: not yet asked).
    on_demand_due: Option<Instant>,
    spot: Arc<SpotPrices>,
    spot_at: Option<Instant>,
    /// Bumped whenever anything above changes.
    version: u64,
}

/// One consistent reading of the catalog.
#[derive(Clone)]
struct CatalogView {
    types: Arc<Vec<TypeInfo>>,
    zones: Arc<BTreeMap<String, BTreeSet<String>>>,
    on_demand: Arc<OnDemandPrices>,
    spot: Arc<SpotPrices>,
    version: u64,
}

/// `class` with `r` as its status (images, subnets, security groups,
/// instance profile).
fn with_resolution(class: &EC2NodeClass, r: &NodeClassResolution) -> EC2NodeClass {
    let mut class = class.clone();
    r.apply_to(class.status.get_or_insert_with(Default::default));
    class
}

/// The messages of the False conditions of a node class's status, when
/// its `Ready` condition is False.
fn not_ready_in_status(class: &EC2NodeClass) -> Option<String> {
    let conds = class.status.as_ref()?.conditions.as_deref()?;
    let ready = crate::api::common::find_condition(Some(conds), "Ready")?;
    if ready.status != crate::api::common::ConditionStatus::False {
        return None;
    }
    let failing: Vec<String> = conds
        .iter()
        .filter(|c| c.type_ != "Ready" && c.status == crate::api::common::ConditionStatus::False)
        .map(|c| format!("{}: {}", c.type_, c.message.as_deref().unwrap_or_default()))
        .collect();
    Some(if failing.is_empty() {
        ready.message.clone().unwrap_or_default()
    } else {
        failing.join("; ")
    })
}

fn view(c: &Catalog) -> CatalogView {
    CatalogView {
        types: Arc::clone(&c.types),
        zones: Arc::clone(&c.zones),
        on_demand: Arc::clone(&c.on_demand),
        spot: Arc::clone(&c.spot),
        version: c.version,
    }
}

/// What the Pricing API said.
enum PricingAnswer {
    /// Nothing asked: an isolated VPC, or GovCloud.
    NotAsked,
    Prices(OnDemandPrices),
    Failed,
}

/// How soon the Pricing API is asked again after it failed.
const PRICING_RETRY: std::time::Duration = std::time::Duration::from_secs(5 * 60);

impl CatalogView {
    fn price(&self, instance_type: &str, zone: &str, capacity_type: &str) -> Option<f64> {
        let od = self.on_demand.get(instance_type).copied();
        if capacity_type == crate::api::CAPACITY_TYPE_RESERVED {
            // Paid for already: about free, yet ordered as on-demand. With
            // no on-demand price it is free, so it still launches.
            return Some(od.map_or(0.0, |p| p / reservations::PRICE_DIVISOR));
        }
        if capacity_type == crate::api::CAPACITY_TYPE_SPOT {
            self.spot
                .get(&(instance_type.to_string(), zone.to_string()))
                .copied()
                .or(od)
        } else {
            od
        }
    }

    fn info(&self, name: &str) -> Option<&TypeInfo> {
        self.types.iter().find(|t| t.name == name)
    }
}

/// Instance types computed for one node class.
struct Computed {
    version: u64,
    settings: NodeClassSettings,
    zones: Option<BTreeSet<String>>,
    reservations: Vec<CapacityReservation>,
    needs: NodeClassNeeds,
    placement: Option<placement::PlacementGroup>,
    types: Arc<Vec<InstanceType>>,
}

type LaunchResult = Result<(FleetInstance, Vec<OfferingKey>), CloudError>;

/// Launches waiting to share a CreateFleet call.
#[derive(Default)]
struct Pending {
    claims: Vec<(String, oneshot::Sender<LaunchResult>)>,
}

/// Removes an open batch if its leader goes away before sending it, so
/// the others waiting on it fail instead of waiting forever.
struct BatchGuard<'a> {
    batches: &'a Mutex<HashMap<String, Pending>>,
    key: Option<String>,
}

impl Drop for BatchGuard<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            lock(self.batches).remove(&key);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The AWS cloud provider. See the module documentation.
pub struct AwsProvider {
    config: AwsConfig,
    region: String,
    ec2: aws_sdk_ec2::Client,
    ssm: aws_sdk_ssm::Client,
    pricing: aws_sdk_pricing::Client,
    clock: Arc<dyn Clock>,
    catalog: tokio::sync::Mutex<Catalog>,
    computed: Mutex<HashMap<String, Computed>>,
    resolutions: tokio::sync::Mutex<HashMap<String, (Instant, String, NodeClassResolution)>>,
    /// Launch template name -> id.
    templates: tokio::sync::Mutex<BTreeMap<String, String>>,
    batches: Mutex<HashMap<String, Pending>>,
    /// Instance id -> instance, for drift checks.
    instances: tokio::sync::Mutex<Option<(Instant, HashMap<String, Instance>)>>,
    /// What CreateFleet found unusable, until when.
    marks: Mutex<Marks>,
    /// Whether [`AwsProvider::run_background`] keeps the catalog fresh.
    background: AtomicBool,
    /// The cluster's Kubernetes version, as last read.
    kubernetes_version: Mutex<Option<String>>,
    iam: aws_sdk_iam::Client,
    /// Instance profile -> its role, as last read.
    profiles: Mutex<HashMap<String, (Instant, Option<String>)>>,
    /// Placement group selector -> when it was resolved, and to what
    /// (see [`placement`]).
    placement_groups: Mutex<HashMap<String, (Instant, Option<placement::PlacementGroup>)>>,
    /// Instance profiles kept from garbage collection until a time.
    protected_profiles: Mutex<HashMap<String, Instant>>,
    /// Zone name -> zone id, from the subnets of resolutions.
    zone_ids: Mutex<BTreeMap<String, String>>,
    /// Instances known to carry their node's `Name` tag.
    named: Mutex<BTreeSet<String>>,
    eks: aws_sdk_eks::Client,
    /// What nodes need to join: the configuration's, with what
    /// [`AwsProvider::discover_cluster`] found.
    cluster: Mutex<config::ClusterAccess>,
    /// Free addresses per subnet, launches in flight counted.
    subnet_ips: Mutex<subnets::SubnetIps>,
    /// Validation decisions ([`validation::cache_key`] -> when, and the
    /// problem if denied), for [`validation::VALIDATION_TTL`].
    validations: Mutex<HashMap<String, (Instant, Option<NodeClassProblem>)>>,
    /// Instances left in each capacity reservation.
    reservations: Mutex<reservations::Availability>,
    /// Instance id -> the reservation it runs in, for the instance given
    /// back when it is terminated.
    reserved_instances: Mutex<HashMap<String, String>>,
}

/// Subnets out of addresses and capacity types that cannot launch, each
/// until a time (Karpenter's unavailable-offerings cache keeps them as
/// long as offerings: [`UNAVAILABLE_TTL`]).
#[derive(Default)]
struct Marks {
    subnets: BTreeMap<String, Timestamp>,
    capacity_types: BTreeMap<String, Timestamp>,
}

impl Marks {
    fn active(map: &BTreeMap<String, Timestamp>, now: Timestamp) -> BTreeSet<String> {
        map.iter()
            .filter(|(_, until)| **until > now)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// How long a subnet out of addresses or a capacity type that failed for
/// want of a role stays unused (Karpenter's `UnavailableOfferingsTTL`).
pub const UNAVAILABLE_TTL: std::time::Duration = std::time::Duration::from_secs(3 * 60);

impl std::fmt::Debug for AwsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsProvider")
            .field("cluster", &self.config.cluster_name)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl AwsProvider {
    /// Builds the provider from the usual AWS configuration chain with
    /// `config`'s overrides. Fails on an invalid config or an unknown
    /// region.
    pub async fn new(config: AwsConfig, clock: Arc<dyn Clock>) -> Result<Self, CloudError> {
        config.validate().map_err(CloudError::InvalidRequest)?;
        let sdk = config.sdk_config().await;
        Self::from_sdk_config(config, &sdk, clock)
    }

    /// Builds the provider from an SDK configuration (region, credentials,
    /// endpoint), e.g. one made for an emulator. `config.region` and
    /// `config.endpoint_url` are not applied again.
    pub fn from_sdk_config(
        config: AwsConfig,
        sdk: &SdkConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, CloudError> {
        config.validate().map_err(CloudError::InvalidRequest)?;
        let region = sdk
            .region()
            .map(|r| r.to_string())
            .or_else(|| config.region.clone())
            .ok_or_else(|| {
                CloudError::InvalidRequest("no AWS region: set --region or AWS_REGION".to_string())
            })?;
        let ec2 = aws_sdk_ec2::Client::new(sdk);
        let ssm = aws_sdk_ssm::Client::new(sdk);
        let pricing = aws_sdk_pricing::Client::from_conf(
            aws_sdk_pricing::config::Builder::from(sdk)
                .region(aws_config::Region::new(config::pricing_region(&region)))
                .build(),
        );
        let kubernetes_version = Mutex::new(config.kubernetes_version.clone());
        let cluster = Mutex::new(config.cluster.clone());
        Ok(AwsProvider {
            eks: config::eks_client(sdk),
            cluster,
            subnet_ips: Mutex::new(subnets::SubnetIps::default()),
            kubernetes_version,
            config,
            region,
            ec2,
            ssm,
            pricing,
            clock,
            catalog: tokio::sync::Mutex::new(Catalog::default()),
            computed: Mutex::new(HashMap::new()),
            resolutions: tokio::sync::Mutex::new(HashMap::new()),
            templates: tokio::sync::Mutex::new(BTreeMap::new()),
            batches: Mutex::new(HashMap::new()),
            instances: tokio::sync::Mutex::new(None),
            marks: Mutex::new(Marks::default()),
            background: AtomicBool::new(false),
            iam: aws_sdk_iam::Client::new(sdk),
            profiles: Mutex::new(HashMap::new()),
            placement_groups: Mutex::new(HashMap::new()),
            protected_profiles: Mutex::new(HashMap::new()),
            zone_ids: Mutex::new(BTreeMap::new()),
            named: Mutex::new(BTreeSet::new()),
            validations: Mutex::new(HashMap::new()),
            reservations: Mutex::new(reservations::Availability::default()),
            reserved_instances: Mutex::new(HashMap::new()),
        })
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    pub fn config(&self) -> &AwsConfig {
        &self.config
    }

    /// Remembers the zone ids `subnets` report, for instances' labels.
    fn remember_zone_ids(&self, subnets: &[crate::api::ec2nodeclass::Subnet]) {
        let mut ids = lock(&self.zone_ids);
        for s in subnets {
            if let Some(id) = &s.zone_id {
                ids.insert(s.zone.clone(), id.clone());
            }
        }
    }

    /// Records what a CreateFleet answer found unusable.
    fn mark(&self, outcome: &launch::FleetOutcome) {
        if !outcome.exhausted_reservations.is_empty() {
            let mut availability = lock(&self.reservations);
            for id in &outcome.exhausted_reservations {
                tracing::info!(capacity_reservation = %id, "the capacity reservation is full; launching elsewhere until EC2 reports room in it");
                availability.exhaust(id);
            }
        }
        if outcome.full_subnets.is_empty() && !outcome.spot_role_missing {
            return;
        }
        let now = self.clock.now();
        let until = now.checked_add(UNAVAILABLE_TTL).unwrap_or(now);
        let mut marks = lock(&self.marks);
        for subnet in &outcome.full_subnets {
            tracing::warn!(subnet = %subnet, "no free address in the subnet; skipping it for 3 minutes");
            marks.subnets.insert(subnet.clone(), until);
            lock(&self.subnet_ips).full(subnet);
        }
        if outcome.spot_role_missing {
            tracing::warn!(
                "spot cannot launch: the account has no Spot service-linked role and the controller may not create it \
                 (create it once: aws iam create-service-linked-role --aws-service-name spot.amazonaws.com); \
                 launching on demand for 3 minutes"
            );
            marks
                .capacity_types
                .insert(crate::api::CAPACITY_TYPE_SPOT.to_string(), until);
        }
    }

    /// The subnets out of addresses, and whether spot is out, now.
    fn active_marks(&self) -> (BTreeSet<String>, bool) {
        let now = self.clock.now();
        let marks = lock(&self.marks);
        (
            Marks::active(&marks.subnets, now),
            Marks::active(&marks.capacity_types, now).contains(crate::api::CAPACITY_TYPE_SPOT),
        )
    }

    fn overheads(&self) -> Overheads {
        Overheads {
            vm_memory_overhead: self.config.vm_memory_overhead,
            reserved_enis: self.config.reserved_enis,
        }
    }

    /// The catalog for launches and instance types: what was never read is
    /// read now; what is older than its TTL too, unless
    /// [`Self::run_background`] keeps it fresh. A refresh that fails keeps
    /// the previous data (logged); with no instance types at all it is an
    /// error. On-demand prices never fail: the built-in ones stand in.
    async fn catalog(&self) -> Result<CatalogView, CloudError> {
        self.refresh_catalog(!self.background.load(Ordering::Relaxed))
            .await
    }

    /// Reads again whatever part of the catalog is older than its TTL (the
    /// background refresh).
    pub async fn refresh(&self) -> Result<(), CloudError> {
        self.refresh_catalog(true).await.map(|_| ())
    }

    async fn refresh_catalog(&self, refresh_stale: bool) -> Result<CatalogView, CloudError> {
        let mut c = self.catalog.lock().await;
        let now = Instant::now();
        let stale = |at: Option<Instant>, ttl| {
            at.is_none_or(|t| refresh_stale && now.duration_since(t) >= ttl)
        };
        if stale(c.types_at, self.config.instance_types_ttl) {
            match self.fetch_types().await {
                Ok((types, zones)) => {
                    c.types = Arc::new(types);
                    c.zones = Arc::new(zones);
                    c.types_at = Some(now);
                    c.version += 1;
                }
                Err(e) if c.types_at.is_some() => {
                    tracing::warn!(error = %e, "refreshing instance types; keeping the previous ones");
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.load_base_prices(&mut c)?;
        let due = c
            .on_demand_due
            .is_none_or(|due| refresh_stale && now >= due);
        if due {
            let (answer, next) = self.fetch_on_demand().await;
            let fresh = match answer {
                // The price file may have changed.
                PricingAnswer::NotAsked => Some(BTreeMap::new()),
                PricingAnswer::Prices(api) => Some(api),
                PricingAnswer::Failed => None,
            };
            if let Some(api) = fresh {
                match self.base_prices() {
                    Ok(mut all) => {
                        all.extend(api);
                        c.on_demand = Arc::new(all);
                        c.version += 1;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the price file; keeping the prices known")
                    }
                }
            }
            c.on_demand_due = Some(now + next);
        }
        if stale(c.spot_at, self.config.spot_prices_ttl) {
            match pricing::fetch_spot(&self.ec2, &self.config.retry).await {
                Ok(prices) => {
                    c.spot = Arc::new(prices);
                    c.version += 1;
                }
                // Until spot prices are known, on-demand prices stand in.
                Err(e) => tracing::warn!(error = %e, "reading spot prices"),
            }
            c.spot_at = Some(now);
        }
        Ok(view(&c))
    }

    /// The catalog for reading instances (get, list, drift, garbage
    /// collection): never the Pricing API nor spot prices, only instance
    /// types if none were read yet, and no failure: an instance's labels
    /// then lack its type's facts.
    async fn instances_catalog(&self) -> CatalogView {
        let mut c = self.catalog.lock().await;
        if c.types_at.is_none() {
            match self.fetch_types().await {
                Ok((types, zones)) => {
                    c.types = Arc::new(types);
                    c.zones = Arc::new(zones);
                    c.types_at = Some(Instant::now());
                    c.version += 1;
                }
                Err(e) => tracing::warn!(error = %e, "reading instance types for instance labels"),
            }
        }
        if let Err(e) = self.load_base_prices(&mut c) {
            tracing::warn!(error = %e, "reading the price file");
        }
        view(&c)
    }

    /// Puts the built-in and price-file prices in place if nothing is yet.
    fn load_base_prices(&self, c: &mut Catalog) -> Result<(), CloudError> {
        if c.on_demand_loaded {
            return Ok(());
        }
        let base = self.base_prices().map_err(CloudError::InvalidRequest)?;
        c.on_demand = Arc::new(base);
        c.on_demand_loaded = true;
        c.version += 1;
        Ok(())
    }

    /// The built-in prices with the price file's over them.
    fn base_prices(&self) -> Result<OnDemandPrices, String> {
        let (mut prices, _) = pricing::builtin(&self.region);
        if let Some(path) = &self.config.pricing_file {
            prices.extend(pricing::read_price_file(path, &self.region)?);
        }
        Ok(prices)
    }

    #[allow(clippy::type_complexity)]
    async fn fetch_types(
        &self,
    ) -> Result<(Vec<TypeInfo>, BTreeMap<String, BTreeSet<String>>), error::AwsError> {
        let retry = &self.config.retry;
        let ec2 = &self.ec2;
        let mut types = paginate(
            retry,
            "ec2:DescribeInstanceTypes",
            |token| {
                ec2.describe_instance_types()
                    .max_results(100)
                    .set_next_token(token)
                    .send()
            },
            |page| {
                let types = page
                    .instance_types()
                    .iter()
                    .filter_map(TypeInfo::from_sdk)
                    .collect();
                (types, page.next_token().map(str::to_string))
            },
        )
        .await?;
        types.sort_by(|a, b| a.name.cmp(&b.name));
        let offerings = paginate(
            retry,
            "ec2:DescribeInstanceTypeOfferings",
            |token| {
                ec2.describe_instance_type_offerings()
                    .location_type(aws_sdk_ec2::types::LocationType::AvailabilityZone)
                    .max_results(1000)
                    .set_next_token(token)
                    .send()
            },
            |page| {
                (
                    page.instance_type_offerings().to_vec(),
                    page.next_token().map(str::to_string),
                )
            },
        )
        .await?;
        let mut zones: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for o in &offerings {
            if let (Some(t), Some(zone)) = (o.instance_type(), o.location()) {
                zones
                    .entry(t.as_str().to_string())
                    .or_default()
                    .insert(zone.to_string());
            }
        }
        Ok((types, zones))
    }

    /// The Pricing API's on-demand prices, if it is asked and answers, and
    /// when to ask again: after the TTL, or [`PRICING_RETRY`] after a
    /// failure. Not asked in an isolated VPC nor in GovCloud, which has no
    /// Pricing API.
    async fn fetch_on_demand(&self) -> (PricingAnswer, std::time::Duration) {
        let ttl = self.config.on_demand_prices_ttl;
        if self.config.isolated_vpc || !pricing::has_pricing_api(&self.region) {
            return (PricingAnswer::NotAsked, ttl);
        }
        match pricing::fetch_on_demand(&self.pricing, &self.config.retry, &self.region).await {
            Ok(prices) => (PricingAnswer::Prices(prices), ttl),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "the Pricing API failed; keeping the on-demand prices already known (built-in, price file, or last read)"
                );
                (PricingAnswer::Failed, PRICING_RETRY.min(ttl))
            }
        }
    }

    /// Every instance type a node class can launch, with its allocatable
    /// and its priced offerings in the zones of the node class's subnets
    /// (every zone when its status reports none). This is what
    /// `dovetail aws instance-types` prints. Offerings in a zone whose
    /// subnets recently had no free address, spot offerings while spot
    /// lacks its service-linked role, and reserved offerings with no
    /// reservation left (no instance left, or expiring) are unavailable.
    pub async fn instance_types_for(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<Arc<Vec<InstanceType>>, CloudError> {
        let types = self.unmarked_instance_types(nodeclass).await?;
        let (full_subnets, spot_out) = self.active_marks();
        // Zones whose subnets are all out of addresses.
        let subnets = nodeclass
            .status
            .as_ref()
            .and_then(|s| s.subnets.as_deref())
            .unwrap_or_default();
        let full_zones: BTreeSet<&str> = subnets
            .iter()
            .map(|s| s.zone.as_str())
            .filter(|z| {
                subnets
                    .iter()
                    .filter(|s| s.zone == *z)
                    .all(|s| full_subnets.contains(&s.id))
            })
            .collect();
        let any_reserved = types.iter().any(|t| {
            t.offerings
                .iter()
                .any(|o| o.capacity_type == crate::api::CAPACITY_TYPE_RESERVED)
        });
        if full_zones.is_empty() && !spot_out && !any_reserved {
            return Ok(types);
        }
        let held = nodeclass
            .status
            .as_ref()
            .and_then(|s| s.capacity_reservations.as_deref())
            .unwrap_or_default();
        let availability = lock(&self.reservations);
        let mut marked = (*types).clone();
        for it in &mut marked {
            for o in &mut it.offerings {
                if o.capacity_type == crate::api::CAPACITY_TYPE_RESERVED
                    && let Some(now) = reservations::reserved_offering(
                        held,
                        Some(&availability),
                        &it.name,
                        &o.zone,
                        o.price,
                    )
                {
                    *o = now;
                }
                if full_zones.contains(o.zone.as_str())
                    || (spot_out && o.capacity_type == crate::api::CAPACITY_TYPE_SPOT)
                {
                    o.available = false;
                }
            }
        }
        Ok(Arc::new(marked))
    }

    /// [`Self::instance_types_for`] before the marks of recent launches.
    async fn unmarked_instance_types(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<Arc<Vec<InstanceType>>, CloudError> {
        let name = nodeclass.metadata.name.clone().unwrap_or_default();
        let settings =
            NodeClassSettings::of(nodeclass).map_err(|reason| CloudError::NodeClassNotReady {
                name: name.clone(),
                reason,
            })?;
        let zones: Option<BTreeSet<String>> = nodeclass
            .status
            .as_ref()
            .and_then(|s| s.subnets.as_ref())
            .filter(|s| !s.is_empty())
            .map(|s| s.iter().map(|s| s.zone.clone()).collect());
        // Zone name -> id, as the node class's subnets report them.
        let subnets = nodeclass
            .status
            .as_ref()
            .and_then(|s| s.subnets.as_deref())
            .unwrap_or_default();
        self.remember_zone_ids(subnets);
        let zone_ids: BTreeMap<String, String> = subnets
            .iter()
            .filter_map(|s| Some((s.zone.clone(), s.zone_id.clone()?)))
            .collect();
        let held: Vec<CapacityReservation> = nodeclass
            .status
            .as_ref()
            .and_then(|s| s.capacity_reservations.clone())
            .unwrap_or_default();
        let placement = self.placement_group(nodeclass).await?;
        let needs = NodeClassNeeds::of(nodeclass, placement.as_ref().map(|p| p.strategy.as_str()));
        let view = self.catalog().await?;
        {
            let computed = lock(&self.computed);
            if let Some(c) = computed.get(&name)
                && c.version == view.version
                && c.settings == settings
                && c.zones == zones
                && c.reservations == held
                && c.needs == needs
                && c.placement == placement
            {
                return Ok(Arc::clone(&c.types));
            }
        }
        let overheads = self.overheads();
        let mut types = Vec::new();
        for info in view.types.iter() {
            let mut offerings = Vec::new();
            for zone in view.zones.get(&info.name).into_iter().flatten() {
                if zones.as_ref().is_some_and(|z| !z.contains(zone)) {
                    continue;
                }
                for (offered, capacity_type) in [
                    (info.on_demand, crate::api::CAPACITY_TYPE_ON_DEMAND),
                    (info.spot, crate::api::CAPACITY_TYPE_SPOT),
                ] {
                    if let (true, Some(price)) =
                        (offered, view.price(&info.name, zone, capacity_type))
                    {
                        offerings.push(Offering {
                            zone: zone.clone(),
                            capacity_type: capacity_type.to_string(),
                            price,
                            available: true,
                            reservations: Vec::new(),
                        });
                    }
                }
                // One reserved offering per zone with a reservation of the
                // type; the instances left are marked per call
                // ([`Self::instance_types_for`]).
                if let Some(price) =
                    view.price(&info.name, zone, crate::api::CAPACITY_TYPE_RESERVED)
                    && let Some(o) =
                        reservations::reserved_offering(&held, None, &info.name, zone, price)
                {
                    offerings.push(o);
                }
            }
            if offerings.is_empty() {
                continue;
            }
            let mut it =
                instance_types::instance_type(info, &settings, &overheads, &self.region, offerings);
            reservations::add_requirements(&mut it, &held);
            // Karpenter marks every offering of a type the node class
            // cannot launch unavailable; it is left out here.
            if !needs.admit(&it, Some(&info.hardware)) {
                continue;
            }
            if let Some(pg) = &placement {
                pg.add_requirements(&mut it);
            }
            let ids: BTreeSet<&str> = it
                .offerings
                .iter()
                .filter_map(|o| zone_ids.get(&o.zone).map(String::as_str))
                .collect();
            if !ids.is_empty() {
                it.requirements
                    .add(instance_types::LABEL_ZONE_ID, Requirement::in_values(ids));
            }
            types.push(it);
        }
        let types = Arc::new(types);
        lock(&self.computed).insert(
            name,
            Computed {
                version: view.version,
                settings,
                zones,
                reservations: held,
                needs,
                placement,
                types: Arc::clone(&types),
            },
        );
        Ok(types)
    }

    /// The instance types of the region that have no on-demand price (so
    /// no on-demand offering), for `dovetail aws instance-types` to report.
    pub async fn unpriced_types(&self) -> Result<Vec<String>, CloudError> {
        let view = self.catalog().await?;
        Ok(view
            .types
            .iter()
            .filter(|t| !view.on_demand.contains_key(&t.name))
            .map(|t| t.name.clone())
            .collect())
    }

    /// The cluster's Kubernetes version AMI aliases resolve for.
    pub fn kubernetes_version(&self) -> Option<String> {
        lock(&self.kubernetes_version).clone()
    }

    /// Sets the cluster's Kubernetes version (`1.35`, or as the API server
    /// reports it, `v1.35.2-eks-...`); later resolutions of AMI aliases
    /// use it. A version that does not parse is ignored (logged).
    pub fn set_kubernetes_version(&self, version: &str) {
        let Some((major, minor)) = config::parse_minor(version) else {
            tracing::warn!(
                version,
                "ignoring a Kubernetes version that is not MAJOR.MINOR"
            );
            return;
        };
        let v = format!("{major}.{minor}");
        let mut current = lock(&self.kubernetes_version);
        if current.as_deref() != Some(v.as_str()) {
            tracing::info!(from = ?*current, to = %v, "the cluster's Kubernetes version changed; AMI aliases follow it");
            *current = Some(v);
        }
    }

    fn resolver<'a>(&'a self, kubernetes_version: Option<&'a str>) -> nodeclass::Resolver<'a> {
        nodeclass::Resolver {
            ec2: &self.ec2,
            ssm: &self.ssm,
            retry: &self.config.retry,
            ssm_root: &self.config.ssm_parameter_root,
            kubernetes_version,
            subnet_ips: Some(&self.subnet_ips),
        }
    }

    /// What nodes need to join the cluster, as known now.
    pub fn cluster_access(&self) -> config::ClusterAccess {
        lock(&self.cluster).clone()
    }

    /// Completes what nodes need to join the cluster, as Karpenter does at
    /// start: `dns_ip` (the kube-dns Service's ClusterIP) where the
    /// configuration sets none, and the endpoint, certificate authority
    /// (`kube_ca` first: the controller's own trust, as Karpenter reads its
    /// REST config) and service CIDR from `eks:DescribeCluster` where the
    /// configuration lacks them. Without an endpoint, a failed
    /// DescribeCluster is an error (Karpenter exits); with one (a cluster
    /// not on EKS, or one whose flags give the rest) it is logged, and the
    /// service CIDR is asked for again when an AL2023 launch needs it.
    pub async fn discover_cluster(
        &self,
        kube_ca: Option<&str>,
        dns_ip: Option<String>,
    ) -> Result<config::ClusterAccess, CloudError> {
        let mut access = self.cluster_access();
        if access.dns_ip.is_none() {
            access.dns_ip = dns_ip;
        }
        if access.ca_bundle.is_none() {
            access.ca_bundle = kube_ca.map(str::to_string);
        }
        if access.incomplete() {
            match config::describe_cluster(&self.eks, &self.config.retry, &self.config.cluster_name)
                .await
            {
                Ok(described) => {
                    access.fill(&described);
                    tracing::info!(
                        endpoint = ?access.endpoint,
                        service_cidr = ?access.service_cidr,
                        ip_family = ?described.ip_family,
                        "discovered the cluster with eks:DescribeCluster"
                    );
                }
                Err(e) if access.endpoint.is_some() => {
                    tracing::warn!(error = %e, "eks:DescribeCluster failed; using the cluster settings given");
                }
                Err(e) => return Err(CloudError::from(e)),
            }
        }
        *lock(&self.cluster) = access.clone();
        Ok(access)
    }

    /// The cluster access for a launch of `family`: AL2023 needs the
    /// service CIDR, which is asked of EKS if still unknown (Karpenter
    /// resolves it when an AL2023 node class is validated); a failure
    /// makes the node class not ready for now.
    async fn cluster_access_for(
        &self,
        family: Family,
        class: &EC2NodeClass,
    ) -> Result<config::ClusterAccess, CloudError> {
        let access = self.cluster_access();
        if family != Family::Al2023 || access.service_cidr.is_some() {
            return Ok(access);
        }
        match config::describe_cluster(&self.eks, &self.config.retry, &self.config.cluster_name)
            .await
        {
            Ok(d) if d.service_cidr.is_some() => {
                let mut c = lock(&self.cluster);
                c.service_cidr.clone_from(&d.service_cidr);
                Ok(c.clone())
            }
            Ok(_) => Err(CloudError::NodeClassNotReady {
                name: class.metadata.name.clone().unwrap_or_default(),
                reason: "eks:DescribeCluster reports no service CIDR, which AL2023's NodeConfig needs (give --service-cidr)".to_string(),
            }),
            Err(e) => Err(CloudError::NodeClassNotReady {
                name: class.metadata.name.clone().unwrap_or_default(),
                reason: format!("detecting the cluster's service CIDR for AL2023 (or give --service-cidr): {e}"),
            }),
        }
    }

    /// Chooses each zone's subnet for `plan` with the launches in flight
    /// counted ([`subnets`]), and points the plan's overrides at them.
    /// Returns what was counted, for [`subnets::SubnetIps::release`].
    fn choose_subnets(
        &self,
        plan: &mut LaunchPlan,
        resolution: &NodeClassResolution,
        full_subnets: &BTreeSet<String>,
        types: &[InstanceType],
    ) -> Vec<subnets::Reservation> {
        let pods = plan.zone_pods(|t| {
            types
                .iter()
                .find(|it| it.name == t)
                .map_or(0, |it| it.capacity.get(crate::model::quantity::PODS))
        });
        let candidates = resolution
            .subnets
            .iter()
            .filter(|s| pods.contains_key(&s.zone) && !full_subnets.contains(&s.id))
            .map(|s| (s.zone.as_str(), s.id.as_str()));
        let (chosen, reservations) =
            lock(&self.subnet_ips).choose(candidates, |z| pods.get(z).copied().unwrap_or(0));
        plan.use_subnets(&chosen);
        reservations
    }

    /// The key of a node class's cached resolution: its spec and the
    /// Kubernetes version its aliases resolve for.
    fn resolution_key(&self, class: &EC2NodeClass) -> String {
        format!(
            "{}@{}",
            serde_json::to_string(&class.spec).unwrap_or_default(),
            self.kubernetes_version().unwrap_or_default()
        )
    }

    /// What a launch from the node class uses: its status when that
    /// reports images, subnets and security groups, else a resolution at
    /// most [`AwsConfig::resolution_ttl`] old.
    async fn resolution_for(
        &self,
        class: &EC2NodeClass,
    ) -> Result<NodeClassResolution, CloudError> {
        if let Some(status) = &class.status {
            let amis = status.amis.clone().unwrap_or_default();
            let subnets = status.subnets.clone().unwrap_or_default();
            let groups = status.security_groups.clone().unwrap_or_default();
            // A role's profile is known once the status names it.
            let profile = match &class.spec.role {
                Some(_) => status.instance_profile.clone(),
                None => class.spec.instance_profile.clone(),
            };
            let profile_known = profile.is_some() || class.spec.role.is_none();
            if !amis.is_empty() && !subnets.is_empty() && !groups.is_empty() && profile_known {
                return Ok(NodeClassResolution {
                    amis,
                    subnets,
                    security_groups: groups,
                    instance_profile: profile,
                    capacity_reservations: status.capacity_reservations.clone().unwrap_or_default(),
                    problems: Vec::new(),
                });
            }
        }
        let name = class.metadata.name.clone().unwrap_or_default();
        let spec = self.resolution_key(class);
        let mut cache = self.resolutions.lock().await;
        if let Some((at, s, r)) = cache.get(&name)
            && *s == spec
            && at.elapsed() < self.config.resolution_ttl
        {
            return Ok(r.clone());
        }
        let r = self
            .resolver(self.kubernetes_version().as_deref())
            .resolve(class)
            .await?;
        let r = self.with_dependents(class, r, None).await?;
        cache.insert(name, (Instant::now(), spec, r.clone()));
        Ok(r)
    }

    /// `r` with the capacity reservations the node class selects, and the
    /// instances left in each taken as the truth; a failed lookup is a
    /// problem (the class is not ready). No terms, no call.
    async fn with_reservations(&self, class: &EC2NodeClass, r: &mut NodeClassResolution) {
        let terms = class
            .spec
            .capacity_reservation_selector_terms
            .as_deref()
            .unwrap_or_default();
        if terms.is_empty() {
            return;
        }
        let now = self.clock.now();
        match reservations::describe(&self.ec2, &self.config.retry, terms, now).await {
            Ok(found) => {
                lock(&self.reservations).sync(&found);
                for f in &found {
                    match reservations::to_status(f, now) {
                        Ok(cr) => r.capacity_reservations.push(cr),
                        Err(e) => tracing::error!(error = %e, "skipping a capacity reservation"),
                    }
                }
            }
            // Karpenter leaves the condition as it was and retries; the
            // status says why here.
            Err(e) => r.problems.push(NodeClassProblem {
                condition: NodeClassCondition::CapacityReservationsReady,
                reason: "CapacityReservationResolutionFailed".to_string(),
                message: format!("capacityReservationSelectorTerms could not be resolved: {e}"),
            }),
        }
    }

    /// The placement group `class` selects, resolved at most once a
    /// minute (Karpenter's cache); `None` without a selector or when EC2
    /// has no such available group.
    async fn placement_group(
        &self,
        class: &EC2NodeClass,
    ) -> Result<Option<placement::PlacementGroup>, AwsError> {
        let Some(selector) = class.spec.placement_group_selector.as_ref() else {
            return Ok(None);
        };
        let key = format!("{:?}/{:?}", selector.id, selector.name);
        if let Some((at, pg)) = lock(&self.placement_groups).get(&key)
            && at.elapsed() < PLACEMENT_GROUP_TTL
        {
            return Ok(pg.clone());
        }
        let pg = placement::describe(&self.ec2, &self.config.retry, selector).await?;
        lock(&self.placement_groups).insert(key, (Instant::now(), pg.clone()));
        Ok(pg)
    }

    /// `PlacementGroupReady`, as Karpenter's placement group reconciler
    /// writes it: False when the selected group is not found or cannot be
    /// resolved.
    async fn with_placement_group(&self, class: &EC2NodeClass, r: &mut NodeClassResolution) {
        let Some(selector) = class.spec.placement_group_selector.as_ref() else {
            return;
        };
        match self.placement_group(class).await {
            Ok(Some(_)) => {}
            Ok(None) => r.problem(
                NodeClassCondition::PlacementGroupReady,
                reasons::PLACEMENT_GROUP_NOT_FOUND,
                format!(
                    "Placement group {:?} not found",
                    placement::selector_text(selector)
                ),
            ),
            Err(e) => r.problem(
                NodeClassCondition::PlacementGroupReady,
                reasons::PLACEMENT_GROUP_RESOLUTION_FAILED,
                format!("Failed to resolve placement group: {e}"),
            ),
        }
    }

    /// A resolution of images, subnets and groups completed with what
    /// depends on more than EC2's describe calls: the instance profile
    /// (read only with `notes`), the capacity reservations, and the fields
    /// dovetail does not implement. Every resolution path goes through it.
    async fn with_dependents(
        &self,
        class: &EC2NodeClass,
        r: NodeClassResolution,
        notes: Option<&mut Vec<String>>,
    ) -> Result<NodeClassResolution, CloudError> {
        let mut r = self.with_instance_profile(class, r, notes).await?;
        self.with_reservations(class, &mut r).await;
        self.with_placement_group(class, &mut r).await;
        Ok(r)
    }

    /// `r` with the instance profile of a node class that names a role:
    /// the one its status names if that holds the role, else one made for
    /// it ([`instanceprofile`]); a role IAM does not know is a problem.
    /// With `notes` (read only: `dovetail aws resolve`), nothing is made:
    /// the profile that would be is named, and the note says so.
    async fn with_instance_profile(
        &self,
        class: &EC2NodeClass,
        mut r: NodeClassResolution,
        notes: Option<&mut Vec<String>>,
    ) -> Result<NodeClassResolution, CloudError> {
        let Some(role) = class.spec.role.as_deref().filter(|r| !r.is_empty()) else {
            return Ok(r);
        };
        let want = instanceprofile::role_name(role).to_string();
        let profiles = instanceprofile::Profiles {
            iam: &self.iam,
            retry: &self.config.retry,
        };
        let current = class
            .status
            .as_ref()
            .and_then(|s| s.instance_profile.clone())
            .filter(|p| !p.is_empty());
        if let Some(current) = &current {
            let cached = lock(&self.profiles)
                .get(current)
                .filter(|(at, _)| at.elapsed() < instanceprofile::PROFILE_TTL)
                .map(|(_, role)| role.clone());
            let role_now = match cached {
                Some(role) => role,
                None => {
                    let role = profiles.role_of(current).await?.flatten();
                    lock(&self.profiles).insert(current.clone(), (Instant::now(), role.clone()));
                    role
                }
            };
            if role_now.as_deref() == Some(want.as_str()) {
                r.instance_profile = Some(current.clone());
                return Ok(r);
            }
        }
        let cluster = &self.config.cluster_name;
        let name = instanceprofile::profile_name(cluster, &self.region, class, role);
        let uid = class
            .metadata
            .uid
            .clone()
            .or_else(|| class.metadata.name.clone())
            .unwrap_or_default();
        let path = instanceprofile::class_path(&self.region, cluster, &uid);
        let tags = instanceprofile::profile_tags(cluster, &self.region, class);
        if let Some(notes) = notes {
            let holds = profiles.role_of(&name).await?.flatten();
            if holds.as_deref() != Some(want.as_str()) {
                notes.push(format!(
                    "the controller would create instance profile {name:?} (path {path}) holding role {want:?}"
                ));
            }
            r.instance_profile = Some(name);
            return Ok(r);
        }
        match profiles.ensure(&name, role, &tags, &path).await {
            Ok(()) => {
                tracing::info!(profile = %name, role = %want, "instance profile ready for the node class's role");
                let until = Instant::now() + self.config.protected_profile_ttl;
                let mut protected = lock(&self.protected_profiles);
                protected.insert(name.clone(), until);
                if let Some(old) = current {
                    protected.insert(old, until);
                }
                drop(protected);
                lock(&self.profiles).insert(name.clone(), (Instant::now(), Some(want)));
                r.instance_profile = Some(name);
            }
            Err(instanceprofile::EnsureError::RoleNotFound(message)) => {
                // Leave no empty profile behind.
                if let Err(e) = profiles.delete(&name).await {
                    tracing::warn!(profile = %name, error = %e, "deleting an instance profile whose role is missing");
                }
                r.instance_profile = None;
                r.problem(
                    NodeClassCondition::InstanceProfileReady,
                    reasons::ROLE_NOT_FOUND,
                    format!(
                        "spec.role: IAM has no role {want:?} for the instance profile ({message})"
                    ),
                );
            }
            Err(instanceprofile::EnsureError::Aws(e)) => return Err(e.into()),
        }
        Ok(r)
    }

    /// The launch a NodeClaim of `class` for one `instance_type` (on
    /// demand, no NodePool) would make, through the launch path's own
    /// planner: its launch template and user data. `class` is read with
    /// `r` as its status. Used by validation and `dovetail aws resolve`.
    pub async fn plan_for_type(
        &self,
        class: &EC2NodeClass,
        r: &NodeClassResolution,
        instance_type: &str,
    ) -> Result<LaunchPlan, CloudError> {
        let class = with_resolution(class, r);
        let types = self.unmarked_instance_types(&class).await?;
        let mut claim = NodeClaim::test(&format!(
            "{}-validation",
            class.metadata.name.as_deref().unwrap_or_default()
        ));
        claim.metadata.labels = None;
        claim.spec.node_class_ref.name = class.metadata.name.clone().unwrap_or_default();
        claim
            .spec
            .requirements
            .push(crate::api::NodeSelectorRequirementWithMinValues::new(
                INSTANCE_TYPE,
                crate::api::Operator::In,
                &[instance_type],
            ));
        let family = Family::of(&class);
        let access = self.cluster_access_for(family, &class).await?;
        let placement = self.placement_group(&class).await?;
        launch::plan(
            &claim,
            &PlanInput {
                cluster: ClusterInfo {
                    name: &self.config.cluster_name,
                    access: &access,
                },
                class: &class,
                family,
                resolution: r,
                types: &types,
                unavailable: &BTreeSet::new(),
                unavailable_subnets: &BTreeSet::new(),
                spot_unavailable: false,
                // On demand, as validation dry-runs it: no reservation.
                reservations: &[],
                availability: &reservations::Availability::default(),
                placement: placement.as_ref(),
            },
        )
    }

    /// The instance type validation dry-runs a launch of: the first of
    /// [`validation::PREFERRED_TYPES`] an image fits and that has an
    /// on-demand offering, else the cheapest such type.
    async fn validation_type(
        &self,
        class: &EC2NodeClass,
        r: &NodeClassResolution,
    ) -> Result<Option<String>, CloudError> {
        let types = self
            .unmarked_instance_types(&with_resolution(class, r))
            .await?;
        let usable = |t: &&InstanceType| {
            image_for(&r.amis, t).is_some()
                && t.offerings
                    .iter()
                    .any(|o| o.available && o.capacity_type == crate::api::CAPACITY_TYPE_ON_DEMAND)
        };
        if let Some(t) = validation::PREFERRED_TYPES
            .iter()
            .find_map(|name| types.iter().filter(usable).find(|t| t.name == *name))
        {
            return Ok(Some(t.name.clone()));
        }
        let cheapest = |t: &InstanceType| {
            t.offerings
                .iter()
                .filter(|o| o.capacity_type == crate::api::CAPACITY_TYPE_ON_DEMAND)
                .map(|o| o.price)
                .fold(f64::INFINITY, f64::min)
        };
        Ok(types
            .iter()
            .filter(usable)
            .min_by(|a, b| {
                cheapest(a)
                    .total_cmp(&cheapest(b))
                    .then_with(|| a.name.cmp(&b.name))
            })
            .map(|t| t.name.clone()))
    }

    /// Decides `ValidationSucceeded` ([`validation`]) and adds its problem
    /// to `r`. With `notes` (read only), no launch template is created and
    /// what could not be checked without one is noted.
    async fn validate(
        &self,
        class: &EC2NodeClass,
        r: &mut NodeClassResolution,
        mut notes: Option<&mut Vec<String>>,
    ) -> Result<(), CloudError> {
        if let Some(p) = validation::precheck(class, r) {
            r.problems.push(p);
            return Ok(());
        }
        if r.fails(NodeClassCondition::ValidationSucceeded) {
            // A field dovetail does not implement: nothing to dry-run.
            return Ok(());
        }
        let Some(instance_type) = self.validation_type(class, r).await? else {
            r.problem(
                NodeClassCondition::ValidationSucceeded,
                reasons::NO_COMPATIBLE_INSTANCE_TYPES,
                "no instance type with an on-demand offering in the subnets' zones fits the resolved images",
            );
            return Ok(());
        };
        let plan = match self.plan_for_type(class, r, &instance_type).await {
            Ok(p) => p,
            Err(CloudError::NodeClassNotReady { reason, .. }) => {
                let cidr_missing = Family::of(class) == Family::Al2023
                    && self.config.cluster.service_cidr.is_none();
                if cidr_missing {
                    r.problem(
                        NodeClassCondition::ValidationSucceeded,
                        reasons::CLUSTER_CIDR_FAILED,
                        format!("Failed to detect the cluster CIDR ({reason})"),
                    );
                } else {
                    r.problem(
                        NodeClassCondition::ValidationSucceeded,
                        reasons::LAUNCH_TEMPLATE_INVALID,
                        reason,
                    );
                }
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let Some((spec, _)) = plan.configs.first() else {
            return Err(CloudError::Api(format!(
                "validating {}: the dry-run launch has no launch template",
                instance_type
            )));
        };
        let key = validation::cache_key(class, r, &plan.tags);
        let cached = lock(&self.validations)
            .get(&key)
            .filter(|(at, _)| at.elapsed() < validation::VALIDATION_TTL)
            .map(|(_, p)| p.clone());
        if let Some(decided) = cached {
            r.problems.extend(decided);
            return Ok(());
        }
        let decided = self
            .dry_run_launch(r, &plan, spec, &instance_type, notes.as_deref_mut())
            .await?;
        let unchecked = notes
            .as_ref()
            .is_some_and(|n| n.iter().any(|m| m.contains("was not dry-run")));
        if !unchecked {
            lock(&self.validations).insert(key, (Instant::now(), decided.clone()));
        }
        r.problems.extend(decided);
        Ok(())
    }

    /// The three authorization dry-runs (see [`validation`]): the first
    /// denial, or `None` when all are allowed.
    async fn dry_run_launch(
        &self,
        r: &NodeClassResolution,
        plan: &LaunchPlan,
        spec: &launch::TemplateSpec,
        instance_type: &str,
        mut notes: Option<&mut Vec<String>>,
    ) -> Result<Option<NodeClassProblem>, CloudError> {
        let name = spec.name(&self.config.cluster_name);
        let read_only = notes.is_some();
        let mut unchecked = Vec::new();
        let decided = self
            .dry_runs(
                r,
                plan,
                spec,
                instance_type,
                &name,
                read_only,
                &mut unchecked,
            )
            .await;
        if let Some(n) = notes.as_deref_mut() {
            n.append(&mut unchecked);
        }
        let (decided, made_note) = decided?;
        if let (Some(n), Some(m)) = (notes, made_note) {
            n.insert(0, m);
        }
        Ok(decided)
    }

    /// The dry-runs of [`Self::dry_run_launch`], each answer read by
    /// `decide`; with the note that the template would be created.
    #[allow(clippy::too_many_arguments)]
    async fn dry_runs(
        &self,
        r: &NodeClassResolution,
        plan: &LaunchPlan,
        spec: &launch::TemplateSpec,
        instance_type: &str,
        name: &str,
        read_only: bool,
        unchecked: &mut Vec<String>,
    ) -> Result<(Option<NodeClassProblem>, Option<String>), CloudError> {
        use validation::{DryRun, Verdict, verdict};
        let retry = &self.config.retry;
        let mut made_note = None;
        let mut decide = |v: Verdict| match v {
            Verdict::Allowed => Ok(None),
            Verdict::Denied(p) => Ok(Some(p)),
            Verdict::Unchecked(m) => {
                unchecked.push(m);
                Ok(None)
            }
            Verdict::Error(e) => Err(CloudError::from(e)),
        };
        let request = self.template_request(spec).dry_run(true);
        let answer = call(retry, "ec2:CreateLaunchTemplate", || request.clone().send()).await;
        if let Some(p) = decide(verdict(DryRun::CreateLaunchTemplate, answer))? {
            return Ok((Some(p), None));
        }
        if !read_only {
            match self.ensure_template(spec).await {
                Ok(_) => {}
                Err(CloudError::AccessDenied { message, .. }) => {
                    let p = NodeClassProblem {
                        condition: NodeClassCondition::ValidationSucceeded,
                        reason: reasons::CREATE_LAUNCH_TEMPLATE_AUTH_FAILED.to_string(),
                        message: format!(
                            "Controller isn't authorized to call ec2:CreateLaunchTemplate: {message}"
                        ),
                    };
                    return Ok((Some(p), None));
                }
                Err(e) => return Err(e),
            }
        } else if self.template_id(name).await?.is_none() {
            made_note = Some(format!(
                "the controller would create launch template {name:?} on the first launch"
            ));
        }
        let template = || {
            FleetLaunchTemplateSpecificationRequest::builder()
                .launch_template_name(name)
                .version("$Latest")
                .build()
        };
        let overrides: Vec<FleetLaunchTemplateOverridesRequest> = r
            .subnets
            .iter()
            .map(|s| {
                FleetLaunchTemplateOverridesRequest::builder()
                    .instance_type(instance_type.into())
                    .subnet_id(&s.id)
                    .build()
            })
            .collect();
        let config = FleetLaunchTemplateConfigRequest::builder()
            .launch_template_specification(template())
            .set_overrides(Some(overrides))
            .build();
        let request = self.fleet_request(plan, vec![config], 1, &[]).dry_run(true);
        let answer = call(retry, "ec2:CreateFleet", || request.clone().send()).await;
        if let Some(p) = decide(verdict(DryRun::CreateFleet, answer))? {
            return Ok((Some(p), made_note));
        }

        // Any subnet allowed is enough; the first one's answer decides.
        let tags: Vec<Tag> = plan
            .tags
            .iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .collect();
        let mut first = None;
        for subnet in &r.subnets {
            let ec2 = &self.ec2;
            let request = ec2
                .run_instances()
                .dry_run(true)
                .min_count(1)
                .max_count(1)
                .launch_template(
                    aws_sdk_ec2::types::LaunchTemplateSpecification::builder()
                        .launch_template_name(name)
                        .version("$Latest")
                        .build(),
                )
                .instance_type(instance_type.into())
                .network_interfaces(
                    aws_sdk_ec2::types::InstanceNetworkInterfaceSpecification::builder()
                        .device_index(0)
                        .subnet_id(&subnet.id)
                        .build(),
                )
                .set_tag_specifications(Some(
                    [
                        ResourceType::Instance,
                        ResourceType::Volume,
                        ResourceType::NetworkInterface,
                    ]
                    .into_iter()
                    .map(|t| {
                        TagSpecification::builder()
                            .resource_type(t)
                            .set_tags(Some(tags.clone()))
                            .build()
                    })
                    .collect(),
                ));
            let answer = call(retry, "ec2:RunInstances", || request.clone().send()).await;
            match verdict(DryRun::RunInstances, answer) {
                Verdict::Allowed => return Ok((None, made_note)),
                v => {
                    first.get_or_insert(v);
                }
            }
        }
        match first {
            Some(v) => Ok((decide(v)?, made_note)),
            None => Ok((None, made_note)),
        }
    }

    /// Resolves a node class as the controller would, writing nothing: no
    /// instance profile or launch template is made (the notes say what
    /// the controller would make), validation's dry-runs included. For
    /// `dovetail aws resolve`.
    pub async fn resolve_read_only(
        &self,
        class: &EC2NodeClass,
    ) -> Result<(nodeclass::Traced, Vec<String>), CloudError> {
        let mut notes = Vec::new();
        let mut traced = self
            .resolver(self.kubernetes_version().as_deref())
            .resolve_traced(class)
            .await?;
        let r = std::mem::take(&mut traced.resolution);
        let mut r = self.with_dependents(class, r, Some(&mut notes)).await?;
        self.validate(class, &mut r, Some(&mut notes)).await?;
        traced.resolution = r;
        Ok((traced, notes))
    }

    /// Deletes the instance profiles dovetail (or Karpenter) made for this
    /// cluster's node classes that no node class in `nodeclasses` names
    /// in its status, no live instance of the cluster uses, and that were
    /// not made or replaced within the last hour. Returns their names.
    pub async fn cleanup_instance_profiles(
        &self,
        nodeclasses: &[EC2NodeClass],
    ) -> Result<Vec<String>, CloudError> {
        let profiles = instanceprofile::Profiles {
            iam: &self.iam,
            retry: &self.config.retry,
        };
        let listed = profiles
            .list(&instanceprofile::cluster_path(
                &self.region,
                &self.config.cluster_name,
            ))
            .await?;
        if listed.is_empty() {
            return Ok(Vec::new());
        }
        let mut keep: BTreeSet<String> = nodeclasses
            .iter()
            .filter_map(|c| c.status.as_ref()?.instance_profile.clone())
            .collect();
        keep.extend(self.instance_profiles_in_use().await?);
        let now = Instant::now();
        {
            let mut protected = lock(&self.protected_profiles);
            protected.retain(|_, until| *until > now);
            keep.extend(protected.keys().cloned());
        }
        let mut deleted = Vec::new();
        for name in listed.into_iter().filter(|n| !keep.contains(n)) {
            profiles.delete(&name).await?;
            lock(&self.profiles).remove(&name);
            deleted.push(name);
        }
        Ok(deleted)
    }

    /// Tags the instances of registered NodeClaims with `Name` (the node's
    /// name), `karpenter.sh/nodeclaim` and `eks:eks-cluster-name`, each
    /// only where missing (Karpenter's `nodeclaim.tagging`). Instances
    /// already seen tagged are not looked at again. Returns the instances
    /// tagged now.
    pub async fn tag_registered(
        &self,
        claims: &[background::Registered],
    ) -> Result<Vec<String>, CloudError> {
        let todo: Vec<(&background::Registered, String)> = {
            let named = lock(&self.named);
            claims
                .iter()
                .filter(|c| !c.node_name.is_empty())
                .filter_map(|c| Some((c, instances::instance_id(&c.provider_id)?.to_string())))
                .filter(|(_, id)| !named.contains(id))
                .collect()
        };
        if todo.is_empty() {
            return Ok(Vec::new());
        }
        let ec2 = &self.ec2;
        let mut tagged = Vec::new();
        for chunk in todo.chunks(200) {
            let ids: Vec<String> = chunk.iter().map(|(_, id)| id.clone()).collect();
            let described = self.describe_instances(Vec::new(), ids).await;
            let described = match described {
                Ok(d) => d,
                // One of them is gone; the others are tried next pass.
                Err(e) if e.code().is_some_and(|c| c.starts_with("InvalidInstanceID")) => {
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            for (claim, id) in chunk {
                let Some(instance) = described.iter().find(|i| i.instance_id() == Some(id)) else {
                    continue;
                };
                let has: BTreeSet<&str> = instance.tags().iter().filter_map(|t| t.key()).collect();
                let want = [
                    ("Name", claim.node_name.as_str()),
                    (TAG_NODECLAIM, claim.nodeclaim.as_str()),
                    (launch::TAG_EKS_CLUSTER, self.config.cluster_name.as_str()),
                ];
                let missing: Vec<Tag> = want
                    .iter()
                    .filter(|(k, _)| !has.contains(k))
                    .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                    .collect();
                if !missing.is_empty() {
                    call(&self.config.retry, "ec2:CreateTags", || {
                        ec2.create_tags()
                            .resources(id)
                            .set_tags(Some(missing.clone()))
                            .send()
                    })
                    .await?;
                    tagged.push(id.clone());
                }
                lock(&self.named).insert(id.clone());
            }
        }
        Ok(tagged)
    }

    /// The instance profiles the cluster's live instances run with.
    async fn instance_profiles_in_use(&self) -> Result<BTreeSet<String>, CloudError> {
        let ec2 = &self.ec2;
        let filters = vec![
            Filter::builder()
                .name(format!("tag:{}", cluster_tag(&self.config.cluster_name)))
                .values("owned")
                .build(),
            Filter::builder()
                .name("instance-state-name")
                .set_values(Some(LIVE_STATES.iter().map(|s| s.to_string()).collect()))
                .build(),
        ];
        let arns = paginate(
            &self.config.retry,
            "ec2:DescribeInstances",
            |token| {
                ec2.describe_instances()
                    .set_filters(Some(filters.clone()))
                    .set_next_token(token)
                    .send()
            },
            |page| {
                let arns = page
                    .reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .filter_map(|i| i.iam_instance_profile()?.arn().map(str::to_string))
                    .collect();
                (arns, page.next_token().map(str::to_string))
            },
        )
        .await?;
        Ok(arns
            .iter()
            .map(|arn| arn.rsplit('/').next().unwrap_or(arn).to_string())
            .collect())
    }

    /// The id of the launch template named `name`, if it exists.
    async fn template_id(&self, name: &str) -> Result<Option<String>, error::AwsError> {
        let ec2 = &self.ec2;
        let found = call(&self.config.retry, "ec2:DescribeLaunchTemplates", || {
            ec2.describe_launch_templates()
                .filters(
                    Filter::builder()
                        .name("launch-template-name")
                        .values(name)
                        .build(),
                )
                .send()
        })
        .await?;
        Ok(found
            .launch_templates()
            .first()
            .and_then(|t| t.launch_template_id())
            .map(str::to_string))
    }

    /// The CreateLaunchTemplate request for `spec` (named, tagged).
    fn template_request(
        &self,
        spec: &launch::TemplateSpec,
    ) -> aws_sdk_ec2::operation::create_launch_template::builders::CreateLaunchTemplateFluentBuilder
    {
        let mut tags = spec.tags.clone();
        tags.insert(cluster_tag(&self.config.cluster_name), "owned".to_string());
        tags.insert(TAG_NODECLASS.to_string(), spec.nodeclass.clone());
        tags.insert(TAG_IMAGE.to_string(), spec.image_id.clone());
        self.ec2
            .create_launch_template()
            .launch_template_name(spec.name(&self.config.cluster_name))
            .launch_template_data(spec.request_data())
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::LaunchTemplate)
                    .set_tags(Some(
                        tags.iter()
                            .map(|(k, v)| Tag::builder().key(k).value(v).build())
                            .collect(),
                    ))
                    .build(),
            )
    }

    /// The id of the launch template for `spec`, creating it on first use.
    async fn ensure_template(&self, spec: &launch::TemplateSpec) -> Result<String, CloudError> {
        let name = spec.name(&self.config.cluster_name);
        let mut cache = self.templates.lock().await;
        if let Some(id) = cache.get(&name) {
            return Ok(id.clone());
        }
        if let Some(id) = self.template_id(&name).await? {
            cache.insert(name, id.clone());
            return Ok(id);
        }
        let request = self.template_request(spec);
        let created = call(&self.config.retry, "ec2:CreateLaunchTemplate", || {
            request.clone().send()
        })
        .await;
        let id = match created {
            Ok(out) => out
                .launch_template()
                .and_then(|t| t.launch_template_id())
                .map(str::to_string),
            // Created meanwhile by another replica: read it.
            Err(e)
                if e.code()
                    .is_some_and(|c| c.starts_with("InvalidLaunchTemplateName.AlreadyExists")) =>
            {
                self.template_id(&name).await?
            }
            Err(e) => return Err(e.into()),
        };
        let id = id.ok_or_else(|| {
            CloudError::Api(format!("launch template {name} has no id after creation"))
        })?;
        tracing::info!(template = %name, id = %id, "created launch template");
        cache.insert(name, id.clone());
        Ok(id)
    }

    /// Sends one CreateFleet for `claims` (one instance each) and hands
    /// each its instance or error.
    async fn launch_fleet(&self, plan: &LaunchPlan, claims: &[String]) -> Vec<LaunchResult> {
        let n = claims.len();
        let mut outcome = None;
        for attempt in 0..2 {
            match self.create_fleet(plan, claims).await {
                Ok(o) if o.template_missing && o.instances.len() < n && attempt == 0 => {
                    // A template was deleted under us: forget them, retry.
                    self.templates.lock().await.clear();
                }
                Ok(o) => {
                    outcome = Some(o);
                    break;
                }
                Err(e) => return vec![Err(e); n],
            }
        }
        let Some(o) = outcome else {
            return vec![Err(CloudError::Api("launch templates kept disappearing".into())); n];
        };
        self.mark(&o);
        if n > 1 {
            for (instance, claim) in o.instances.iter().zip(claims) {
                let ec2 = &self.ec2;
                let tagged = call(&self.config.retry, "ec2:CreateTags", || {
                    ec2.create_tags()
                        .resources(&instance.id)
                        .tags(Tag::builder().key(TAG_NODECLAIM).value(claim).build())
                        .send()
                })
                .await;
                if let Err(e) = tagged {
                    tracing::warn!(instance = %instance.id, nodeclaim = %claim, error = %e, "tagging a launched instance");
                }
            }
        }
        let failure = || {
            if let Some(m) = &o.denied {
                CloudError::AccessDenied {
                    action: "ec2:RunInstances".to_string(),
                    message: format!(
                        "{m} (CreateFleet also needs ec2:CreateTags, and iam:PassRole for the node role)"
                    ),
                }
            } else if !o.refused.is_empty() {
                CloudError::InsufficientCapacity {
                    offerings: o.refused.clone(),
                }
            } else if !o.errors.is_empty() {
                CloudError::Api(format!("CreateFleet: {}", o.errors.join("; ")))
            } else {
                CloudError::Api("CreateFleet launched no instance".to_string())
            }
        };
        (0..n)
            .map(|i| match o.instances.get(i) {
                Some(instance) => Ok((instance.clone(), o.refused.clone())),
                None => Err(failure()),
            })
            .collect()
    }

    /// The CreateFleet request of `plan` with its launch template
    /// `configs`, for `total` instances, tagged with the claim when there
    /// is one and with the batch's claims when there are several.
    fn fleet_request(
        &self,
        plan: &LaunchPlan,
        configs: Vec<FleetLaunchTemplateConfigRequest>,
        total: i32,
        claims: &[String],
    ) -> aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder {
        let mut tags: Vec<Tag> = plan
            .tags
            .iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .collect();
        match claims {
            [] => {}
            [claim] => tags.push(Tag::builder().key(TAG_NODECLAIM).value(claim).build()),
            batch => tags.push(
                Tag::builder()
                    .key(TAG_LAUNCH_BATCH)
                    .value(batch.join(","))
                    .build(),
            ),
        }
        let tag_specs: Vec<TagSpecification> = [
            ResourceType::Instance,
            ResourceType::Volume,
            ResourceType::Fleet,
        ]
        .into_iter()
        .map(|r| {
            TagSpecification::builder()
                .resource_type(r)
                .set_tags(Some(tags.clone()))
                .build()
        })
        .collect();
        let spot = plan.capacity_type == crate::api::CAPACITY_TYPE_SPOT;
        // A reserved launch is an on-demand fleet into the templates'
        // reservations; a capacity block's and an interruptible
        // reservation's have their own capacity types (Karpenter's).
        let kind = plan.reservation_kind();
        let capacity_block = kind.is_some_and(|k| k.capacity_block);
        let interruptible = kind.is_some_and(|k| k.interruptible && !k.capacity_block);
        let target_type = if spot {
            DefaultTargetCapacityType::Spot
        } else if capacity_block {
            DefaultTargetCapacityType::CapacityBlock
        } else if interruptible {
            DefaultTargetCapacityType::ReservedCapacity
        } else {
            DefaultTargetCapacityType::OnDemand
        };
        let reserved_options = interruptible.then(|| {
            aws_sdk_ec2::types::ReservedCapacityOptionsRequest::builder()
                .reservation_types(
                    aws_sdk_ec2::types::FleetReservationType::InterruptibleCapacityReservation,
                )
                .build()
        });
        let prioritized = plan
            .configs
            .iter()
            .flat_map(|(_, o)| o)
            .any(|o| o.priority.is_some());
        self.ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(total)
                    .default_target_capacity_type(target_type)
                    .build(),
            )
            .set_on_demand_options((!capacity_block && !interruptible).then(|| {
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(if prioritized {
                        FleetOnDemandAllocationStrategy::Prioritized
                    } else {
                        FleetOnDemandAllocationStrategy::LowestPrice
                    })
                    .build()
            }))
            .set_reserved_capacity_options(reserved_options)
            .spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(if prioritized {
                        SpotAllocationStrategy::CapacityOptimizedPrioritized
                    } else {
                        SpotAllocationStrategy::PriceCapacityOptimized
                    })
                    .build(),
            )
            .set_launch_template_configs(Some(configs))
            .set_tag_specifications(Some(tag_specs))
            .set_context(plan.context.clone())
    }

    async fn create_fleet(
        &self,
        plan: &LaunchPlan,
        claims: &[String],
    ) -> Result<launch::FleetOutcome, CloudError> {
        let mut configs = Vec::new();
        for (spec, overrides) in &plan.configs {
            let id = self.ensure_template(spec).await?;
            configs.push(
                FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_id(id)
                            .version("$Latest")
                            .build(),
                    )
                    .set_overrides(Some(
                        overrides
                            .iter()
                            .map(|o| {
                                FleetLaunchTemplateOverridesRequest::builder()
                                    .instance_type(o.instance_type.as_str().into())
                                    .subnet_id(&o.subnet_id)
                                    .availability_zone(&o.zone)
                                    .set_priority(o.priority.map(|p| p as f64))
                                    .build()
                            })
                            .collect(),
                    ))
                    .build(),
            );
        }
        let total = i32::try_from(claims.len()).unwrap_or(i32::MAX);
        let request = self.fleet_request(plan, configs, total, claims);
        // One token for every attempt of this request: a CreateFleet that
        // succeeded but whose answer was lost (a 5xx, a timeout) is not
        // carried out again when retried.
        let token = error::client_token();
        let out = call(&self.config.retry, "ec2:CreateFleet", || {
            request.clone().client_token(&token).send()
        })
        .await;
        match out {
            Ok(out) => Ok(launch::outcome(&out, plan)),
            // A launch template deleted out of band (the whole request
            // fails when it names one EC2 does not know).
            Err(e) if e.code().is_some_and(launch::is_template_not_found) => {
                Ok(launch::FleetOutcome {
                    template_missing: true,
                    ..launch::FleetOutcome::default()
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Joins or opens the batch of launches with `plan`'s key and returns
    /// this claim's share.
    async fn launch_batched(&self, plan: &LaunchPlan, claim: &str) -> LaunchResult {
        let key = plan.batch_key();
        let (tx, rx) = oneshot::channel();
        let leader = {
            let mut batches = lock(&self.batches);
            match batches.get_mut(&key) {
                Some(p) => {
                    p.claims.push((claim.to_string(), tx));
                    false
                }
                None => {
                    batches.insert(
                        key.clone(),
                        Pending {
                            claims: vec![(claim.to_string(), tx)],
                        },
                    );
                    true
                }
            }
        };
        if !leader {
            return rx.await.unwrap_or_else(|_| {
                Err(CloudError::Api(
                    "the launch this one was batched with was cancelled".to_string(),
                ))
            });
        }
        let mut guard = BatchGuard {
            batches: &self.batches,
            key: Some(key.clone()),
        };
        let start = Instant::now();
        let mut seen = 1;
        loop {
            tokio::time::sleep(self.config.launch_batch_idle).await;
            let now = lock(&self.batches).get(&key).map_or(0, |p| p.claims.len());
            if now == seen || start.elapsed() >= self.config.launch_batch_max {
                break;
            }
            seen = now;
        }
        guard.key = None;
        let pending = lock(&self.batches).remove(&key).unwrap_or_default();
        let names: Vec<String> = pending.claims.iter().map(|(c, _)| c.clone()).collect();
        if names.len() > 1 {
            tracing::info!(
                launches = names.len(),
                "batching launches into one CreateFleet"
            );
        }
        let mut results = Vec::with_capacity(names.len());
        for batch in launch::batches(&names, TAG_VALUE_MAX) {
            results.extend(self.launch_fleet(plan, batch).await);
        }
        for ((_, sender), result) in pending.claims.into_iter().zip(results) {
            let _ = sender.send(result);
        }
        rx.await
            .unwrap_or_else(|_| Err(CloudError::Api("the launch's result was lost".to_string())))
    }

    fn labels_of(
        &self,
        view: &CatalogView,
        instance_type: &str,
        os: &str,
    ) -> BTreeMap<String, String> {
        view.info(instance_type)
            .map(|i| i.labels(&self.region, os))
            .unwrap_or_else(|| {
                BTreeMap::from([(INSTANCE_TYPE.to_string(), instance_type.to_string())])
            })
    }

    /// Every page of DescribeInstances for `filters` and `ids` (either may
    /// be empty), as EC2 answers it.
    async fn describe_instances(
        &self,
        filters: Vec<Filter>,
        ids: Vec<String>,
    ) -> Result<Vec<aws_sdk_ec2::types::Instance>, AwsError> {
        let ec2 = &self.ec2;
        paginate(
            &self.config.retry,
            "ec2:DescribeInstances",
            |token| {
                ec2.describe_instances()
                    .set_filters((!filters.is_empty()).then(|| filters.clone()))
                    .set_instance_ids((!ids.is_empty()).then(|| ids.clone()))
                    .set_next_token(token)
                    .send()
            },
            |page| {
                let instances = page
                    .reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .cloned()
                    .collect();
                (instances, page.next_token().map(str::to_string))
            },
        )
        .await
    }

    async fn describe(
        &self,
        filters: Vec<Filter>,
        ids: Vec<String>,
    ) -> Result<Vec<Instance>, CloudError> {
        let view = self.instances_catalog().await;
        let listed = self.describe_instances(filters, ids).await;
        let listed = match listed {
            Ok(l) => l,
            // An id EC2 does not know (any more).
            Err(e) if e.code().is_some_and(|c| c.starts_with("InvalidInstanceID")) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        {
            let mut reserved = lock(&self.reserved_instances);
            for i in &listed {
                if let (Some(id), Some(labels)) = (i.instance_id(), instances::reservation(i))
                    && !matches!(
                        i.state().and_then(|s| s.name()).map(|n| n.as_str()),
                        Some("shutting-down" | "terminated")
                    )
                {
                    reserved
                        .entry(id.to_string())
                        .or_insert_with(|| labels[0].1.clone());
                }
            }
        }
        Ok(listed
            .iter()
            .filter_map(|i| {
                let os = match i.platform().map(|p| p.as_str()) {
                    Some("windows" | "Windows") => "windows",
                    _ => "linux",
                };
                instances::convert_with_zone_ids(
                    i,
                    &self.region,
                    |t| self.labels_of(&view, t, os),
                    |t, z, c| view.price(t, z, c),
                    |z| lock(&self.zone_ids).get(z).cloned(),
                )
            })
            .collect())
    }

    /// An instance of a reservation is going: its place is free again
    /// (before EC2's count says so; overestimating is the lesser harm).
    fn reservation_freed(&self, instance_id: &str) {
        if let Some(id) = lock(&self.reserved_instances).remove(instance_id) {
            lock(&self.reservations).give_back(&id);
        }
    }

    /// Deletes the launch templates of this cluster that no node class
    /// uses: their node class is not among `nodeclasses`, or its status
    /// no longer lists their image. Returns the deleted templates' names.
    pub async fn cleanup_launch_templates(
        &self,
        nodeclasses: &[EC2NodeClass],
    ) -> Result<Vec<String>, CloudError> {
        let retry = &self.config.retry;
        let ec2 = &self.ec2;
        let tag = cluster_tag(&self.config.cluster_name);
        let templates = paginate(
            retry,
            "ec2:DescribeLaunchTemplates",
            |token| {
                ec2.describe_launch_templates()
                    .filters(
                        Filter::builder()
                            .name(format!("tag:{tag}"))
                            .values("owned")
                            .build(),
                    )
                    .set_next_token(token)
                    .send()
            },
            |page| {
                (
                    page.launch_templates().to_vec(),
                    page.next_token().map(str::to_string),
                )
            },
        )
        .await?;
        let classes: HashMap<&str, &EC2NodeClass> = nodeclasses
            .iter()
            .filter_map(|c| Some((c.metadata.name.as_deref()?, c)))
            .collect();
        let mut deleted = Vec::new();
        for t in templates {
            let tags: BTreeMap<&str, &str> = t
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?, t.value().unwrap_or_default())))
                .collect();
            let (Some(id), Some(name)) = (t.launch_template_id(), t.launch_template_name()) else {
                continue;
            };
            let class = tags.get(TAG_NODECLASS).and_then(|n| classes.get(n));
            let stale = match class {
                None => true,
                Some(c) => match (
                    c.status.as_ref().and_then(|s| s.amis.as_ref()),
                    tags.get(TAG_IMAGE),
                ) {
                    (Some(amis), Some(image)) if !amis.is_empty() => {
                        !amis.iter().any(|a| a.id == *image)
                    }
                    _ => false,
                },
            };
            if !stale {
                continue;
            }
            let result = call(retry, "ec2:DeleteLaunchTemplate", || {
                ec2.delete_launch_template().launch_template_id(id).send()
            })
            .await;
            match result {
                Ok(_) => deleted.push(name.to_string()),
                Err(e) if e.code().is_some_and(|c| c.contains("NotFound")) => {}
                Err(e) => return Err(e.into()),
            }
            self.templates.lock().await.remove(name);
        }
        Ok(deleted)
    }
}

impl CloudProvider for AwsProvider {
    async fn create(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
        unavailable: &BTreeSet<OfferingKey>,
    ) -> Result<Launched, CloudError> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        // As Karpenter: a class whose status says it is not ready does
        // not launch (validation may have failed where the selectors
        // resolved).
        if let Some(reason) = not_ready_in_status(nodeclass) {
            return Err(CloudError::NodeClassNotReady {
                name: nodeclass.metadata.name.clone().unwrap_or_default(),
                reason,
            });
        }
        let resolution = self.resolution_for(nodeclass).await?;
        if !resolution.is_ready() {
            return Err(CloudError::NodeClassNotReady {
                name: nodeclass.metadata.name.clone().unwrap_or_default(),
                reason: resolution.summary(),
            });
        }
        let types = self.unmarked_instance_types(nodeclass).await?;
        let placement = self.placement_group(nodeclass).await?;
        let (full_subnets, spot_out) = self.active_marks();
        let family = Family::of(nodeclass);
        // Planned and counted against its reservations at once, so
        // concurrent launches do not all aim at the last instance left.
        let access = self.cluster_access_for(family, nodeclass).await?;
        let (mut plan, targeted) = {
            let mut availability = lock(&self.reservations);
            let plan = launch::plan(
                claim,
                &PlanInput {
                    cluster: ClusterInfo {
                        name: &self.config.cluster_name,
                        access: &access,
                    },
                    class: nodeclass,
                    family,
                    resolution: &resolution,
                    types: &types,
                    unavailable,
                    unavailable_subnets: &full_subnets,
                    spot_unavailable: spot_out,
                    reservations: &resolution.capacity_reservations,
                    availability: &availability,
                    placement: placement.as_ref(),
                },
            )?;
            let targeted: Vec<String> = plan
                .reservations()
                .into_iter()
                .map(str::to_string)
                .collect();
            for id in &targeted {
                availability.take(id);
            }
            (plan, targeted)
        };
        let addresses = self.choose_subnets(&mut plan, &resolution, &full_subnets, &types);
        let launched = self.launch_batched(&plan, &name).await;
        lock(&self.subnet_ips).release(
            &addresses,
            launched
                .as_ref()
                .ok()
                .and_then(|(f, _)| f.subnet_id.as_deref()),
        );
        // The instance's reservation keeps its count; the others get theirs
        // back (but those EC2 said are full).
        let used = launched.as_ref().ok().and_then(|(fleet, _)| {
            (fleet.capacity_type == crate::api::CAPACITY_TYPE_RESERVED)
                .then(|| plan.reservation_of(&fleet.instance_type, &fleet.zone))
                .flatten()
                .map(str::to_string)
        });
        {
            let mut availability = lock(&self.reservations);
            for id in targeted.iter().filter(|id| Some(*id) != used.as_ref()) {
                availability.give_back(id);
            }
        }
        let (fleet, refused) = launched?;
        let reservation = used.as_ref().and_then(|id| {
            resolution
                .capacity_reservations
                .iter()
                .find(|r| &r.id == id)
        });
        if let Some(r) = reservation {
            lock(&self.reserved_instances).insert(fleet.id.clone(), r.id.clone());
        }
        let chosen = plan.find(
            &fleet.instance_type,
            fleet.subnet_id.as_deref(),
            Some(&fleet.zone),
        );
        let template = plan
            .configs
            .iter()
            .find(|(_, o)| o.iter().any(|x| Some(x) == chosen))
            .map(|(t, _)| t);
        let image = template.map(|t| t.image_id.clone());
        let efa_attached = template.is_some_and(|t| t.efa_interfaces > 0);
        let it = types.iter().find(|t| t.name == fleet.instance_type);
        let nodepool = claim.nodepool_name().unwrap_or_default().to_string();
        let key = OfferingKey {
            instance_type: fleet.instance_type.clone(),
            zone: fleet.zone.clone(),
            capacity_type: fleet.capacity_type.clone(),
        };
        let type_labels = it
            .map(|t| {
                t.requirements
                    .labels()
                    .into_iter()
                    .filter(|(k, _)| k != ZONE && k != CAPACITY_TYPE)
                    .collect()
            })
            .unwrap_or_default();
        let mut labels = instance_labels(type_labels, &key, &self.region, &nodepool);
        labels.insert(
            instance_types::LABEL_TENANCY.to_string(),
            plan.tenancy.clone(),
        );
        for (k, v) in reservation.map(reservations::labels).into_iter().flatten() {
            labels.insert(k.to_string(), v);
        }
        if let Some(partition) = plan.partition {
            labels.insert(
                placement::LABEL_PLACEMENT_GROUP_PARTITION.to_string(),
                partition.to_string(),
            );
        }
        if let Some(id) = resolution
            .subnets
            .iter()
            .find(|s| s.zone == fleet.zone)
            .and_then(|s| s.zone_id.clone())
        {
            labels.insert(instance_types::LABEL_ZONE_ID.to_string(), id);
        }
        let mut security_group_ids: Vec<String> = resolution
            .security_groups
            .iter()
            .map(|g| g.id.clone())
            .collect();
        security_group_ids.sort();
        let price = it
            .and_then(|t| {
                t.offerings
                    .iter()
                    .find(|o| o.zone == fleet.zone && o.capacity_type == fleet.capacity_type)
            })
            .map(|o| o.price)
            .or(chosen.map(|o| o.price))
            .unwrap_or(0.0);
        let instance = Instance {
            provider_id: instances::provider_id(&fleet.zone, &fleet.id),
            id: fleet.id.clone(),
            instance_type: fleet.instance_type.clone(),
            zone: fleet.zone.clone(),
            capacity_type: fleet.capacity_type.clone(),
            price,
            launched_at: self.clock.now(),
            state: InstanceState::Pending,
            nodeclaim: name,
            launch_batch: Vec::new(),
            nodepool,
            labels: labels.into(),
            image_id: image,
            subnet_id: fleet.subnet_id.clone(),
            security_group_ids,
            efa_attached,
        };
        if let Some((_, cache)) = self.instances.lock().await.as_mut() {
            cache.insert(instance.id.clone(), instance.clone());
        }
        Ok(Launched { instance, refused })
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        let not_found = || CloudError::NotFound(provider_id.to_string());
        let id = instances::instance_id(provider_id).ok_or_else(not_found)?;
        let ec2 = &self.ec2;
        let out = call(&self.config.retry, "ec2:TerminateInstances", || {
            ec2.terminate_instances().instance_ids(id).send()
        })
        .await;
        let out = match out {
            Ok(o) => o,
            Err(e) if e.code().is_some_and(|c| c.starts_with("InvalidInstanceID")) => {
                self.reservation_freed(id);
                return Err(not_found());
            }
            Err(e) => return Err(e.into()),
        };
        self.reservation_freed(id);
        if let Some((_, cache)) = self.instances.lock().await.as_mut() {
            cache.remove(id);
        }
        let change = out.terminating_instances().first();
        let state = |s: Option<&aws_sdk_ec2::types::InstanceState>| {
            s.and_then(|s| s.name()).map(|n| n.as_str().to_string())
        };
        if let Some("terminated" | "shutting-down") =
            state(change.and_then(|c| c.previous_state())).as_deref()
        {
            return Err(not_found());
        }
        // Done only once EC2 says the instance is going: an answer that
        // leaves it running (or no answer for it) is checked again, and
        // failing that the delete is retried.
        let mut current = state(change.and_then(|c| c.current_state()));
        if !matches!(current.as_deref(), Some("shutting-down" | "terminated")) {
            current = match self.get(provider_id).await {
                Ok(i) => Some(
                    match i.state {
                        InstanceState::ShuttingDown => "shutting-down",
                        InstanceState::Terminated => "terminated",
                        InstanceState::Running => "running",
                        InstanceState::Pending => "pending",
                    }
                    .to_string(),
                ),
                Err(CloudError::NotFound(_)) => Some("terminated".to_string()),
                Err(e) => return Err(e),
            };
        }
        match current.as_deref() {
            Some("shutting-down" | "terminated") => Ok(()),
            other => Err(CloudError::Api(format!(
                "instance {id} is still {} after TerminateInstances; the delete will be retried",
                other.unwrap_or("running")
            ))),
        }
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        let not_found = || CloudError::NotFound(provider_id.to_string());
        let id = instances::instance_id(provider_id).ok_or_else(not_found)?;
        self.describe(Vec::new(), vec![id.to_string()])
            .await?
            .into_iter()
            .find(|i| i.id == id && i.state != InstanceState::Terminated)
            .ok_or_else(not_found)
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        let filters = vec![
            Filter::builder()
                .name(format!("tag:{}", cluster_tag(&self.config.cluster_name)))
                .values("owned")
                .build(),
            Filter::builder()
                .name("tag-key")
                .values(launch::TAG_NODEPOOL)
                .build(),
            Filter::builder()
                .name("instance-state-name")
                .set_values(Some(LIVE_STATES.iter().map(|s| s.to_string()).collect()))
                .build(),
        ];
        let mut listed = self.describe(filters, Vec::new()).await?;
        listed.retain(|i| i.state != InstanceState::Terminated);
        listed.sort_by(|a, b| a.id.cmp(&b.id));
        *self.instances.lock().await = Some((
            Instant::now(),
            listed.iter().map(|i| (i.id.clone(), i.clone())).collect(),
        ));
        Ok(listed)
    }

    async fn instance_types(
        &self,
        nodepool: &NodePool,
        nodeclass: &EC2NodeClass,
    ) -> Result<Vec<InstanceType>, CloudError> {
        let constraints = nodepool_constraints(nodepool)?;
        let types = self.instance_types_for(nodeclass).await?;
        // Types no resolved image fits cannot launch from this class.
        let amis = nodeclass
            .status
            .as_ref()
            .and_then(|s| s.amis.clone())
            .unwrap_or_default();
        Ok(types
            .iter()
            .filter(|it| type_allowed(it, &constraints))
            .filter(|it| amis.is_empty() || image_for(&amis, it).is_some())
            .cloned()
            .collect())
    }

    async fn resolve_node_class(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<NodeClassResolution, CloudError> {
        let r = self
            .resolver(self.kubernetes_version().as_deref())
            .resolve(nodeclass)
            .await?;
        let mut r = self.with_dependents(nodeclass, r, None).await?;
        self.remember_zone_ids(&r.subnets);
        self.validate(nodeclass, &mut r, None).await?;
        let name = nodeclass.metadata.name.clone().unwrap_or_default();
        let spec = self.resolution_key(nodeclass);
        self.resolutions
            .lock()
            .await
            .insert(name, (Instant::now(), spec, r.clone()));
        Ok(r)
    }

    async fn is_drifted(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
    ) -> Result<Vec<DriftReason>, CloudError> {
        let provider_id = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        let id = instances::instance_id(&provider_id)
            .ok_or_else(|| CloudError::NotFound(provider_id.clone()))?
            .to_string();
        let fresh = {
            let cache = self.instances.lock().await;
            cache
                .as_ref()
                .is_some_and(|(at, _)| at.elapsed() < self.config.instance_cache_ttl)
        };
        if !fresh {
            self.list().await?;
        }
        let cached = self
            .instances
            .lock()
            .await
            .as_ref()
            .and_then(|(_, m)| m.get(&id).cloned());
        let instance = match cached {
            Some(i) => i,
            None => self.get(&provider_id).await?,
        };
        let mut out: Vec<DriftReason> = nodeclass
            .status
            .as_ref()
            .map(|status| instance_drift(&instance, status))
            .unwrap_or_default();
        // Not while the group cannot be looked up (Karpenter would then
        // drift every node in a group).
        if let Ok(pg) = self.placement_group(nodeclass).await {
            out.extend(crate::cloud::placement_drift(
                claim,
                pg.as_ref().map(|p| p.id.as_str()),
            ));
        }
        Ok(out)
    }
}
