//! The catalog and prices: instance types and their offerings read with
//! DescribeInstanceTypes and DescribeInstanceTypeOfferings, on-demand and
//! spot prices, kept for their TTLs, and the types computed per node
//! class (see the module above).

use super::*;

/// The instance types, their zones and prices, as last read.
#[derive(Default)]
pub(super) struct Catalog {
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
pub(super) struct CatalogView {
    types: Arc<Vec<TypeInfo>>,
    zones: Arc<BTreeMap<String, BTreeSet<String>>>,
    on_demand: Arc<OnDemandPrices>,
    spot: Arc<SpotPrices>,
    version: u64,
}

pub(super) fn view(c: &Catalog) -> CatalogView {
    CatalogView {
        types: Arc::clone(&c.types),
        zones: Arc::clone(&c.zones),
        on_demand: Arc::clone(&c.on_demand),
        spot: Arc::clone(&c.spot),
        version: c.version,
    }
}

/// What the Pricing API said.
pub(super) enum PricingAnswer {
    /// Nothing asked: an isolated VPC, or GovCloud.
    NotAsked,
    Prices(OnDemandPrices),
    Failed,
}

/// How soon the Pricing API is asked again after it failed.
pub(super) const PRICING_RETRY: std::time::Duration = std::time::Duration::from_secs(5 * 60);

impl CatalogView {
    pub(super) fn price(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
    ) -> Option<f64> {
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

    pub(super) fn info(&self, name: &str) -> Option<&TypeInfo> {
        self.types.iter().find(|t| t.name == name)
    }
}

/// Instance types computed for one node class.
pub(super) struct Computed {
    version: u64,
    settings: NodeClassSettings,
    zones: Option<BTreeSet<String>>,
    reservations: Vec<CapacityReservation>,
    needs: NodeClassNeeds,
    placement: Option<placement::PlacementGroup>,
    types: Arc<Vec<InstanceType>>,
}

impl AwsProvider {
    pub(super) fn overheads(&self) -> Overheads {
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
    pub(super) async fn catalog(&self) -> Result<CatalogView, CloudError> {
        self.refresh_catalog(!self.background.load(Ordering::Relaxed))
            .await
    }

    /// Reads again whatever part of the catalog is older than its TTL (the
    /// background refresh).
    pub async fn refresh(&self) -> Result<(), CloudError> {
        self.refresh_catalog(true).await.map(|_| ())
    }

    pub(super) async fn refresh_catalog(
        &self,
        refresh_stale: bool,
    ) -> Result<CatalogView, CloudError> {
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
    pub(super) async fn instances_catalog(&self) -> CatalogView {
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
    pub(super) fn load_base_prices(&self, c: &mut Catalog) -> Result<(), CloudError> {
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
    pub(super) fn base_prices(&self) -> Result<OnDemandPrices, String> {
        let (mut prices, _) = pricing::builtin(&self.region);
        if let Some(path) = &self.config.pricing_file {
            prices.extend(pricing::read_price_file(path, &self.region)?);
        }
        Ok(prices)
    }

    #[allow(clippy::type_complexity)]
    pub(super) async fn fetch_types(
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
    pub(super) async fn fetch_on_demand(&self) -> (PricingAnswer, std::time::Duration) {
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
    pub(super) async fn unmarked_instance_types(
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
}
