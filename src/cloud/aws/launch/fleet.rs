//! CreateFleet: the offerings a NodeClaim may launch as (`plan`), its
//! overrides, and how the answer maps back to an instance and refused
//! offerings (`outcome`).

use super::*;

/// One CreateFleet override.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    pub price: f64,
    /// Its rank in a price-overlaid NodeClaim's launch order (CreateFleet
    /// priority, lower first); `None` launches by price.
    pub priority: Option<usize>,
    /// The reservation a reserved launch targets through this override.
    pub reservation: Option<String>,
}

/// A launch, ready to send: the capacity type, the launch template per
/// image with its overrides (cheapest first, the config with the cheapest
/// override first), the instance tags but the NodeClaim's.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchPlan {
    pub capacity_type: String,
    /// `default` or `dedicated` (Karpenter's choice: default when allowed).
    pub tenancy: String,
    /// The placement group partition the launch asks for.
    pub partition: Option<i32>,
    pub configs: Vec<(TemplateSpec, Vec<Override>)>,
    pub tags: BTreeMap<String, String>,
    pub context: Option<String>,
}

impl LaunchPlan {
    /// Launches with the same key may share one CreateFleet call.
    pub fn batch_key(&self) -> String {
        format!("{self:?}")
    }

    /// The override an instance was launched from, by type and subnet or
    /// zone.
    pub fn find(
        &self,
        instance_type: &str,
        subnet: Option<&str>,
        zone: Option<&str>,
    ) -> Option<&Override> {
        self.configs.iter().flat_map(|(_, o)| o).find(|o| {
            o.instance_type == instance_type
                && (subnet.is_some_and(|s| s == o.subnet_id) || zone.is_some_and(|z| z == o.zone))
        })
    }

    /// The zones the plan launches into, each with the fewest pods of its
    /// instance types there (`pods_of` by type): the addresses a node of
    /// the launch takes at least, one per pod with the VPC CNI, which
    /// Karpenter counts against the zone's subnet while the launch is in
    /// flight.
    pub fn zone_pods(&self, pods_of: impl Fn(&str) -> i64) -> BTreeMap<String, i64> {
        let mut out: BTreeMap<String, i64> = BTreeMap::new();
        for o in self.configs.iter().flat_map(|(_, o)| o) {
            let pods = pods_of(&o.instance_type);
            out.entry(o.zone.clone())
                .and_modify(|p| *p = (*p).min(pods))
                .or_insert(pods);
        }
        out
    }

    /// Launches every override of a zone through `subnets[zone]` (the
    /// subnet chosen with the launches in flight counted).
    pub fn use_subnets(&mut self, subnets: &BTreeMap<String, String>) {
        for o in self.configs.iter_mut().flat_map(|(_, o)| o) {
            if let Some(s) = subnets.get(&o.zone) {
                o.subnet_id.clone_from(s);
            }
        }
    }

    /// The reservation of a reserved launch of `instance_type` in `zone`.
    pub fn reservation_of(&self, instance_type: &str, zone: &str) -> Option<&str> {
        self.configs
            .iter()
            .flat_map(|(_, o)| o)
            .find(|o| o.instance_type == instance_type && o.zone == zone)
            .and_then(|o| o.reservation.as_deref())
    }

    /// The reservations the plan targets.
    pub fn reservations(&self) -> BTreeSet<&str> {
        self.configs
            .iter()
            .flat_map(|(_, o)| o)
            .filter_map(|o| o.reservation.as_deref())
            .collect()
    }

    /// The kind of reservation a reserved plan launches into.
    pub fn reservation_kind(&self) -> Option<&TemplateReservation> {
        self.configs
            .iter()
            .find_map(|(t, _)| t.capacity_reservation.as_ref())
    }

    /// The zone of a subnet the plan launches into.
    pub fn zone_of(&self, subnet: &str) -> Option<&str> {
        self.configs
            .iter()
            .flat_map(|(_, o)| o)
            .find(|o| o.subnet_id == subnet)
            .map(|o| o.zone.as_str())
    }
}

/// Whether Karpenter launches `it` only when nothing generic fits: bare
/// metal, GPUs, Neuron or Gaudi accelerators.
pub(super) fn is_exotic(it: &InstanceType) -> bool {
    let metal = it
        .requirements
        .get("karpenter.k8s.aws/instance-size")
        .is_some_and(|r| !r.complement && r.values.iter().any(|v| v.contains("metal")));
    metal
        || [
            "aws.amazon.com/neuron",
            "aws.amazon.com/neuroncore",
            "amd.com/gpu",
            "nvidia.com/gpu",
            "habana.ai/gaudi",
        ]
        .iter()
        .any(|r| it.capacity.get(r) > 0)
}

/// What a launch needs besides the NodeClaim.
pub struct PlanInput<'a> {
    pub cluster: ClusterInfo<'a>,
    pub class: &'a EC2NodeClass,
    pub family: Family,
    pub resolution: &'a NodeClassResolution,
    /// Every instance type of the node class (offerings priced).
    pub types: &'a [InstanceType],
    pub unavailable: &'a BTreeSet<OfferingKey>,
    /// Subnets recently out of addresses: a zone whose subnets all are is
    /// not launched into.
    pub unavailable_subnets: &'a BTreeSet<String>,
    /// Spot recently failed for want of its service-linked role: spot
    /// offerings count as unavailable.
    pub spot_unavailable: bool,
    /// The node class's capacity reservations (its status), and the
    /// instances left in each.
    pub reservations: &'a [CapacityReservation],
    pub availability: &'a Availability,
    /// The placement group the node class selects, resolved.
    pub placement: Option<&'a PlacementGroup>,
}

/// An offering a launch may use.
pub(super) struct Candidate<'a> {
    price: f64,
    instance_type: &'a str,
    zone: &'a str,
    capacity_type: &'a str,
    subnet: &'a str,
    image: &'a Ami,
    pods: i64,
    /// EFA interfaces to attach (0 unless the NodeClaim requests EFA).
    efa: i64,
    /// The reservation a reserved offering launches into.
    reservation: Option<&'a CapacityReservation>,
}

/// Karpenter's reserved filters: with a reserved offering among the
/// candidates, only reserved ones stay, of the kind of the cheapest
/// (ordinary reservations before capacity blocks before interruptible
/// ones on a tie), and of capacity blocks only the cheapest, as
/// CreateFleet launches from one block at a time.
pub(super) fn keep_reserved(candidates: &mut Vec<Candidate<'_>>) {
    let kind = |c: &Candidate<'_>| {
        c.reservation.map(|r| {
            let t = TemplateReservation::of(r);
            // Karpenter's priorities on a price tie.
            match (t.capacity_block, t.interruptible) {
                (false, false) => 0,
                (true, _) => 1,
                (false, true) => 2,
            }
        })
    };
    let Some(best) = candidates
        .iter()
        .filter_map(|c| Some((c.price, kind(c)?)))
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
        .map(|(_, k)| k)
    else {
        return;
    };
    candidates.retain(|c| kind(c) == Some(best));
    if best == 1 {
        let cheapest = candidates
            .iter()
            .enumerate()
            .min_by(|(_, a), (_, b)| a.price.total_cmp(&b.price))
            .map(|(i, _)| i)
            .unwrap_or(0);
        let one = candidates.swap_remove(cheapest);
        candidates.clear();
        candidates.push(one);
    }
}

/// Plans the launch of a NodeClaim (see the module documentation).
pub fn plan(claim: &NodeClaim, input: &PlanInput<'_>) -> Result<LaunchPlan, CloudError> {
    let class_name = input.class.metadata.name.clone().unwrap_or_default();
    let not_ready = |reason: String| CloudError::NodeClassNotReady {
        name: class_name.clone(),
        reason,
    };
    let requirements = requirements_of(&claim.spec.requirements)
        .map_err(|e| CloudError::InvalidRequest(format!("spec.requirements: {e}")))?;
    let requests = claim_requests(claim)?;
    let constraints = instance_constraints(&requirements);
    let allows = |key: &str, value: &str| requirements.get(key).is_none_or(|r| r.has(value));
    // Default tenancy where the claim allows it, as Karpenter chooses.
    let tenancy = if allows(LABEL_TENANCY, TENANCY_DEFAULT) {
        TENANCY_DEFAULT
    } else {
        TENANCY_DEDICATED
    };
    // A zone's id, where the node class's status knows it.
    let zone_id_of: BTreeMap<&str, &str> = input
        .resolution
        .subnets
        .iter()
        .filter_map(|s| Some((s.zone.as_str(), s.zone_id.as_deref()?)))
        .collect();
    let zone_id_allowed = |zone: &str| match requirements.get(LABEL_ZONE_ID) {
        None => true,
        Some(r) => zone_id_of.get(zone).is_some_and(|id| r.has(id)),
    };
    let mut subnet_of_zone: BTreeMap<&str, &str> = BTreeMap::new();
    // Zones whose every subnet is out of addresses: their offerings are
    // unavailable, as if out of capacity.
    let mut full_zones: BTreeSet<&str> = BTreeSet::new();
    for s in &input.resolution.subnets {
        if input.unavailable_subnets.contains(&s.id) {
            full_zones.insert(s.zone.as_str());
            continue;
        }
        subnet_of_zone
            .entry(s.zone.as_str())
            .or_insert(s.id.as_str());
    }
    full_zones.retain(|z| !subnet_of_zone.contains_key(z));

    // The reservation labels a node gets only when launched into one: a
    // requirement on them that does not allow their absence keeps the
    // claim to reserved offerings, and picks among reservations.
    let reservation_keys = [
        LABEL_RESERVATION_ID,
        LABEL_RESERVATION_TYPE,
        LABEL_RESERVATION_INTERRUPTIBLE,
    ];
    let needs_reservation = reservation_keys
        .iter()
        .any(|k| requirements.get(k).is_some_and(|r| !r.allows_absent()));
    let reservation_allowed = |r: &CapacityReservation| {
        reservations::labels(r)
            .iter()
            .all(|(k, v)| requirements.get(k).is_none_or(|req| req.has(v)))
    };
    let mut allowed_any = false;
    let mut known_out = Vec::new();
    // EFA interfaces are attached only for a NodeClaim that requests EFA,
    // or from a node class that configures its interfaces (Karpenter's
    // rule): one per the type's `vpc.amazonaws.com/efa`.
    let wants_efa = requests.get(EFA) > 0 || input.class.spec.network_interfaces.is_some();
    let mut candidates: Vec<Candidate<'_>> = Vec::new();
    for it in input.types {
        if !type_allowed(it, &constraints) || !requests.fits_in(&it.allocatable) {
            continue;
        }
        let image = image_for(&input.resolution.amis, it);
        for o in &it.offerings {
            let reserved = o.capacity_type == crate::api::CAPACITY_TYPE_RESERVED;
            if !allows(ZONE, &o.zone)
                || !allows(CAPACITY_TYPE, &o.capacity_type)
                || !zone_id_allowed(&o.zone)
                || (needs_reservation && !reserved)
            {
                continue;
            }
            allowed_any = true;
            let key = offering_key(it, o);
            if input.unavailable.contains(&key)
                || (input.spot_unavailable && o.capacity_type == crate::api::CAPACITY_TYPE_SPOT)
                || full_zones.contains(o.zone.as_str())
            {
                known_out.push(key);
                continue;
            }
            // A reserved offering launches into one of its reservations
            // with instances left; with none, it is out.
            let reservation = if reserved {
                match reservations::choose(
                    input.reservations,
                    input.availability,
                    &it.name,
                    &o.zone,
                    reservation_allowed,
                ) {
                    Some(r) => Some(r),
                    None => {
                        known_out.push(key);
                        continue;
                    }
                }
            } else {
                None
            };
            let (Some(image), Some(subnet)) = (image, subnet_of_zone.get(o.zone.as_str())) else {
                continue;
            };
            if o.available {
                candidates.push(Candidate {
                    price: o.price,
                    instance_type: &it.name,
                    zone: &o.zone,
                    capacity_type: &o.capacity_type,
                    subnet,
                    image,
                    pods: it.capacity.get(PODS),
                    efa: if wants_efa { it.capacity.get(EFA) } else { 0 },
                    reservation,
                });
            }
        }
    }
    if !allowed_any {
        return Err(CloudError::InvalidRequest(
            "no offering of any instance type satisfies the NodeClaim's requirements and resource requests"
                .to_string(),
        ));
    }
    if candidates.is_empty() {
        if known_out.is_empty() {
            return Err(not_ready(
                "no allowed instance type has an image, a subnet in its zones, and a price"
                    .to_string(),
            ));
        }
        known_out.sort();
        return Err(CloudError::InsufficientCapacity {
            offerings: known_out,
        });
    }
    // Karpenter's launch-time filters, in its order. Reserved first: with
    // a reserved offering left, only reserved offerings, of one kind.
    keep_reserved(&mut candidates);
    let by_name: BTreeMap<&str, &InstanceType> =
        input.types.iter().map(|t| (t.name.as_str(), t)).collect();
    let min_values: Vec<(&str, i64)> = claim
        .spec
        .requirements
        .iter()
        .filter_map(|r| Some((r.key.as_str(), r.min_values?)))
        .collect();
    if min_values.is_empty() {
        // Exotic types (GPUs, accelerators, bare metal) only when nothing
        // generic fits.
        let exotic = |name: &str| by_name.get(name).is_some_and(|t| is_exotic(t));
        if candidates.iter().any(|c| !exotic(c.instance_type)) {
            candidates.retain(|c| !exotic(c.instance_type));
        }
        // No spot offering pricier than the cheapest on-demand one.
        if allows(CAPACITY_TYPE, crate::api::CAPACITY_TYPE_SPOT)
            && allows(CAPACITY_TYPE, crate::api::CAPACITY_TYPE_ON_DEMAND)
        {
            let cheapest_on_demand = candidates
                .iter()
                .filter(|c| c.capacity_type == crate::api::CAPACITY_TYPE_ON_DEMAND)
                .map(|c| c.price)
                .min_by(f64::total_cmp);
            let any_spot = candidates
                .iter()
                .any(|c| c.capacity_type == crate::api::CAPACITY_TYPE_SPOT);
            if let (Some(limit), true) = (cheapest_on_demand, any_spot) {
                candidates.retain(|c| {
                    c.capacity_type != crate::api::CAPACITY_TYPE_SPOT || c.price <= limit
                });
            }
        }
    }
    // At most MAX_INSTANCE_TYPES types, the cheapest (by their cheapest
    // offering, either capacity type); with minValues, they must still
    // offer that many values of each key.
    let mut lowest: BTreeMap<&str, f64> = BTreeMap::new();
    for c in &candidates {
        let e = lowest.entry(c.instance_type).or_insert(c.price);
        *e = e.min(c.price);
    }
    let mut ordered: Vec<(&str, f64)> = lowest.into_iter().collect();
    ordered.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    ordered.truncate(MAX_INSTANCE_TYPES);
    let kept: BTreeSet<&str> = ordered.iter().map(|(n, _)| *n).collect();
    for (key, min) in &min_values {
        let values: BTreeSet<&str> = kept
            .iter()
            .filter_map(|n| by_name.get(n))
            .filter_map(|t| t.requirements.get(key))
            .filter(|r| !r.complement)
            .flat_map(|r| r.values.iter().map(String::as_str))
            .collect();
        if (values.len() as i64) < *min {
            tracing::warn!(
                key,
                min_values = min,
                found = values.len(),
                "minValues not met by the cheapest {MAX_INSTANCE_TYPES} instance types"
            );
            return Err(CloudError::InsufficientCapacity {
                offerings: Vec::new(),
            });
        }
    }
    candidates.retain(|c| kept.contains(c.instance_type));
    // Reserved, else spot, else on-demand (Karpenter's order).
    let has = |ct: &str| candidates.iter().any(|c| c.capacity_type == ct);
    let capacity_type = if has(crate::api::CAPACITY_TYPE_RESERVED) {
        crate::api::CAPACITY_TYPE_RESERVED
    } else if has(crate::api::CAPACITY_TYPE_SPOT) {
        crate::api::CAPACITY_TYPE_SPOT
    } else {
        crate::api::CAPACITY_TYPE_ON_DEMAND
    };
    candidates.retain(|c| c.capacity_type == capacity_type);
    // A price-overlaid NodeClaim launches in its overlaid order, with
    // CreateFleet's `prioritized` strategies, as the reference does.
    let priority = launch_priority(claim);
    let rank = |t: &str| {
        priority
            .as_ref()
            .map_or(0, |p| p.get(t).copied().unwrap_or(usize::MAX))
    };
    candidates.sort_by(|a, b| {
        rank(a.instance_type)
            .cmp(&rank(b.instance_type))
            .then_with(|| a.price.total_cmp(&b.price))
            .then_with(|| a.instance_type.cmp(b.instance_type))
            .then_with(|| a.zone.cmp(b.zone))
    });

    let registration = Registration::of(claim);
    // One user data per max pods: the kubelet is told its pods, so types
    // with different pod counts need different launch templates.
    let mut user_data_of: BTreeMap<i64, String> = BTreeMap::new();
    for c in &candidates {
        if let std::collections::btree_map::Entry::Vacant(e) = user_data_of.entry(c.pods) {
            e.insert(
                user_data(
                    input.family,
                    input.class,
                    input.cluster,
                    &registration,
                    c.pods,
                )
                .map_err(&not_ready)?,
            );
        }
    }
    let spec = &input.class.spec;
    let mut security_group_ids: Vec<String> = input
        .resolution
        .security_groups
        .iter()
        .map(|g| g.id.clone())
        .collect();
    security_group_ids.sort();
    let block_devices = block_devices(input.family, input.class);
    let metadata = spec
        .metadata_options
        .clone()
        .unwrap_or_else(MetadataOptions::defaulted);
    // The launch's tags (but the NodeClaim's): on the instances, volumes
    // and fleet, and on the templates and what they create (network
    // interfaces, spot requests), as Karpenter tags them.
    let mut tags: BTreeMap<String, String> = spec.tags.clone().unwrap_or_default();
    tags.insert(cluster_tag(input.cluster.name), "owned".to_string());
    tags.insert(TAG_EKS_CLUSTER.to_string(), input.cluster.name.to_string());
    tags.insert(TAG_NODECLASS.to_string(), class_name.clone());
    // Always, empty for a NodeClaim of no NodePool (as Karpenter): the IAM
    // policy lets the controller create only what carries the key.
    tags.insert(
        TAG_NODEPOOL.to_string(),
        claim.nodepool_name().unwrap_or_default().to_string(),
    );
    let spot = capacity_type == crate::api::CAPACITY_TYPE_SPOT;
    // The placement group, and a partition group's partition: the lowest
    // the NodeClaim allows, as Karpenter picks it.
    let placement = input.placement.map(|pg| {
        let allowed = requirements
            .get(LABEL_PLACEMENT_GROUP_PARTITION)
            .filter(|r| !r.complement)
            .map(|r| r.values.iter().cloned().collect::<Vec<_>>());
        TemplatePlacement {
            group_id: pg.id.clone(),
            partition: pg.partition_for(allowed.as_deref()),
        }
    });
    let mut configs: Vec<(TemplateSpec, Vec<Override>)> = Vec::new();
    for c in candidates {
        let o = Override {
            instance_type: c.instance_type.to_string(),
            zone: c.zone.to_string(),
            subnet_id: c.subnet.to_string(),
            price: c.price,
            priority: priority.as_ref().map(|_| rank(c.instance_type)),
            reservation: c.reservation.map(|r| r.id.clone()),
        };
        let image = c.image;
        let efa = c.efa;
        let user_data = &user_data_of[&c.pods];
        // A template per reservation: it names the one it targets.
        let target = c.reservation.map(TemplateReservation::of);
        match configs.iter_mut().find(|(t, _)| {
            t.image_id == image.id
                && t.user_data == *user_data
                && t.efa_interfaces == efa
                && t.capacity_reservation == target
        }) {
            Some((_, overrides)) => overrides.push(o),
            None => configs.push((
                TemplateSpec {
                    image_id: image.id.clone(),
                    user_data: user_data.clone(),
                    block_devices: block_devices.clone(),
                    metadata: metadata.clone(),
                    security_group_ids: security_group_ids.clone(),
                    instance_profile: input.resolution.instance_profile.clone(),
                    monitoring: spec.detailed_monitoring.unwrap_or(false),
                    public_ip: spec.associate_public_ip_address,
                    nodeclass: class_name.clone(),
                    tenancy: (tenancy == TENANCY_DEDICATED).then(|| tenancy.to_string()),
                    tags: tags.clone(),
                    spot,
                    efa_interfaces: efa,
                    ipv6: input.cluster.access.ipv6(),
                    connection_tracking: spec.connection_tracking.clone().filter(|ct| {
                        ct.tcp_established_timeout.is_some()
                            || ct.udp_stream_timeout.is_some()
                            || ct.udp_timeout.is_some()
                    }),
                    ip_prefix_count: spec.ip_prefix_count,
                    network_interfaces: spec.network_interfaces.clone().unwrap_or_default(),
                    nested_virtualization: spec
                        .cpu_options
                        .as_ref()
                        .and_then(|c| c.nested_virtualization),
                    placement_group: placement.clone(),
                    capacity_reservation: target,
                },
                vec![o],
            )),
        }
    }

    Ok(LaunchPlan {
        partition: placement.and_then(|p| p.partition),
        capacity_type: capacity_type.to_string(),
        tenancy: tenancy.to_string(),
        configs,
        tags,
        context: spec.context.clone(),
    })
}

/// An instance CreateFleet launched.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetInstance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: Option<String>,
    pub capacity_type: String,
}

/// CreateFleet's answer, read against the plan that asked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetOutcome {
    pub instances: Vec<FleetInstance>,
    /// Offerings that had no capacity.
    pub refused: Vec<OfferingKey>,
    /// Other errors, `code: message`.
    pub errors: Vec<String>,
    /// An access-denied error's message.
    pub denied: Option<String>,
    /// A launch template was missing (deleted under us).
    pub template_missing: bool,
    /// Subnets that had no free address ([`SUBNET_FULL`]).
    pub full_subnets: Vec<String>,
    /// Spot could not launch for want of its service-linked role
    /// ([`SPOT_ROLE_MISSING`]).
    pub spot_role_missing: bool,
    /// Reservations a reserved launch found without capacity
    /// (`ReservationCapacityExceeded`, or another capacity error).
    pub exhausted_reservations: Vec<String>,
}

/// The capacity type of an instance or error of a CreateFleet answer, by
/// its lifecycle: a reserved plan launches reserved (EC2 says
/// `on-demand`, or the block's or interruptible reservation's market).
pub(super) fn answered_capacity_type(lifecycle: Option<&str>, plan: &LaunchPlan) -> String {
    match lifecycle {
        Some("spot") => crate::api::CAPACITY_TYPE_SPOT.to_string(),
        _ if plan.capacity_type == crate::api::CAPACITY_TYPE_RESERVED => {
            crate::api::CAPACITY_TYPE_RESERVED.to_string()
        }
        Some(_) => crate::api::CAPACITY_TYPE_ON_DEMAND.to_string(),
        None => plan.capacity_type.clone(),
    }
}

/// Whether an error code means a launch template does not exist (any
/// more): `InvalidLaunchTemplateName.NotFoundException`,
/// `InvalidLaunchTemplateId.NotFound`, ...
pub fn is_template_not_found(code: &str) -> bool {
    code.starts_with("InvalidLaunchTemplateName.NotFound")
        || code.starts_with("InvalidLaunchTemplateId.NotFound")
        || code.starts_with("InvalidLaunchTemplateId.VersionNotFound")
}

/// Reads CreateFleet's output.
pub fn outcome(
    out: &aws_sdk_ec2::operation::create_fleet::CreateFleetOutput,
    plan: &LaunchPlan,
) -> FleetOutcome {
    let mut o = FleetOutcome::default();
    for i in out.instances() {
        let overrides = i
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        let subnet = i
            .subnet_id()
            .or_else(|| overrides.and_then(|x| x.subnet_id()))
            .map(str::to_string);
        let Some(it) = i.instance_type().map(|t| t.as_str()).or_else(|| {
            overrides
                .and_then(|x| x.instance_type())
                .map(|t| t.as_str())
        }) else {
            continue;
        };
        let zone = i
            .availability_zone()
            .or_else(|| overrides.and_then(|x| x.availability_zone()))
            .or_else(|| subnet.as_deref().and_then(|s| plan.zone_of(s)))
            .unwrap_or_default()
            .to_string();
        let capacity_type = answered_capacity_type(i.lifecycle().map(|l| l.as_str()), plan);
        for id in i.instance_ids() {
            o.instances.push(FleetInstance {
                id: id.clone(),
                instance_type: it.to_string(),
                zone: zone.clone(),
                subnet_id: subnet.clone(),
                capacity_type: capacity_type.clone(),
            });
        }
    }
    for e in out.errors() {
        let code = e.error_code().unwrap_or_default();
        let message = e.error_message().unwrap_or_default();
        let overrides = e
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        if code == SUBNET_FULL
            && let Some(subnet) = overrides.and_then(|x| x.subnet_id())
            && !o.full_subnets.iter().any(|s| s == subnet)
        {
            o.full_subnets.push(subnet.to_string());
        }
        if code == SPOT_ROLE_MISSING {
            // Every spot offering of the launch is out, not just one.
            o.spot_role_missing = true;
            for (_, overrides) in &plan.configs {
                for x in overrides {
                    let key = OfferingKey {
                        instance_type: x.instance_type.clone(),
                        zone: x.zone.clone(),
                        capacity_type: crate::api::CAPACITY_TYPE_SPOT.to_string(),
                    };
                    if plan.capacity_type == crate::api::CAPACITY_TYPE_SPOT
                        && !o.refused.contains(&key)
                    {
                        o.refused.push(key);
                    }
                }
            }
        } else if CAPACITY_ERRORS.contains(&code) {
            let it = overrides
                .and_then(|x| x.instance_type())
                .map(|t| t.as_str().to_string());
            let zone = overrides.and_then(|x| x.availability_zone()).or_else(|| {
                overrides
                    .and_then(|x| x.subnet_id())
                    .and_then(|s| plan.zone_of(s))
            });
            if let (Some(it), Some(zone)) = (it, zone) {
                if let Some(r) = plan.reservation_of(&it, zone)
                    && !o.exhausted_reservations.iter().any(|x| x == r)
                {
                    o.exhausted_reservations.push(r.to_string());
                }
                let key = OfferingKey {
                    instance_type: it,
                    zone: zone.to_string(),
                    capacity_type: answered_capacity_type(e.lifecycle().map(|l| l.as_str()), plan),
                };
                if !o.refused.contains(&key) {
                    o.refused.push(key);
                }
            }
        } else if code == "UnauthorizedOperation" || code.starts_with("AccessDenied") {
            o.denied = Some(format!("{code}: {message}"));
        } else if is_template_not_found(code) {
            o.template_missing = true;
        } else {
            let e = format!("{code}: {message}");
            if !o.errors.contains(&e) {
                o.errors.push(e);
            }
        }
    }
    o.refused.sort();
    o
}

/// `names` in order, cut into runs whose comma-joined names fit in `max`
/// characters (a tag's value); a name longer than that runs alone.
pub fn batches(names: &[String], max: usize) -> Vec<&[String]> {
    let mut out = Vec::new();
    let (mut start, mut len) = (0, 0);
    for (i, name) in names.iter().enumerate() {
        let add = if i == start {
            name.len()
        } else {
            name.len() + 1
        };
        if i > start && len + add > max {
            out.push(&names[start..i]);
            (start, len) = (i, name.len());
        } else {
            len += add;
        }
    }
    if start < names.len() {
        out.push(&names[start..]);
    }
    out
}
