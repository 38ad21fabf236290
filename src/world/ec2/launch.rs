//! How the simulated EC2 launches an instance for a NodeClaim.
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
//! group (see [`super::nodeclass`]).

use super::*;

impl SimEc2 {
    /// Is the offering inside an active insufficient-capacity window?
    fn refused(&self, it: &InstanceType, offering: &Offering, now: Timestamp) -> bool {
        self.windows
            .iter()
            .any(|w| w.refuses_parts(&it.name, &offering.zone, &offering.capacity_type, now))
    }

    pub(super) fn launch(
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
        state.instances.insert(id, Arc::new(instance.clone()));
        state.generation += 1;
        Ok(Launched {
            instance: self.observe(&instance, now),
            refused,
        })
    }
}
