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
//! The provider's own methods are split by responsibility: `catalog`
//! (types and prices), `resolve` (node classes and their validation),
//! `launcher` (templates and CreateFleet) and `inventory` (instances and
//! clean-up); this file holds the provider, its state and its
//! [`CloudProvider`] implementation, which composes them.
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
mod catalog;
pub mod config;
pub mod credentials;
pub mod error;
pub mod iam;
pub mod instance_types;
pub mod instanceprofile;
pub mod instances;
mod inventory;
pub mod launch;
mod launcher;
pub mod nodeclass;
pub mod placement;
pub mod pricing;
pub mod reservations;
mod resolve;
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

use self::catalog::{Catalog, CatalogView, Computed};
use self::error::{call, paginate};
use self::instance_types::{Family, NodeClassSettings, Overheads, TypeInfo};
use self::launch::{
    ClusterInfo, FleetInstance, LaunchPlan, PlanInput, TAG_IMAGE, TAG_LAUNCH_BATCH, TAG_NODECLAIM,
    TAG_NODECLASS, TAG_VALUE_MAX, cluster_tag,
};
use self::launcher::Pending;
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
    /// DescribeInstances filters for the cluster's live instances (its tag
    /// valued `owned`, a [`LIVE_STATES`] state), carrying every tag key of
    /// `tag_keys` too.
    fn live_instance_filters(&self, tag_keys: &[&str]) -> Vec<Filter> {
        let mut filters = vec![
            Filter::builder()
                .name(format!("tag:{}", cluster_tag(&self.config.cluster_name)))
                .values("owned")
                .build(),
        ];
        filters.extend(
            tag_keys
                .iter()
                .map(|k| Filter::builder().name("tag-key").values(*k).build()),
        );
        filters.push(
            Filter::builder()
                .name("instance-state-name")
                .set_values(Some(LIVE_STATES.iter().map(|s| s.to_string()).collect()))
                .build(),
        );
        filters
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

    async fn list(&self) -> Result<Vec<Arc<Instance>>, CloudError> {
        let filters = self.live_instance_filters(&[launch::TAG_NODEPOOL]);
        let mut listed = self.describe(filters, Vec::new()).await?;
        listed.retain(|i| i.state != InstanceState::Terminated);
        listed.sort_by(|a, b| a.id.cmp(&b.id));
        *self.instances.lock().await = Some((
            Instant::now(),
            listed.iter().map(|i| (i.id.clone(), i.clone())).collect(),
        ));
        Ok(listed.into_iter().map(Arc::new).collect())
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
