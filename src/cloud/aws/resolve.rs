//! Node class resolution: the cluster's access and Kubernetes version,
//! subnets, security groups, images, capacity reservations, placement
//! groups and instance profiles, and `ValidationSucceeded`'s dry runs.

use super::*;

impl AwsProvider {
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

    pub(super) fn resolver<'a>(
        &'a self,
        kubernetes_version: Option<&'a str>,
    ) -> nodeclass::Resolver<'a> {
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
    pub(super) async fn cluster_access_for(
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
    pub(super) fn choose_subnets(
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
    pub(super) fn resolution_key(&self, class: &EC2NodeClass) -> String {
        format!(
            "{}@{}",
            serde_json::to_string(&class.spec).unwrap_or_default(),
            self.kubernetes_version().unwrap_or_default()
        )
    }

    /// What a launch from the node class uses: its status when that
    /// reports images, subnets and security groups, else a resolution at
    /// most [`AwsConfig::resolution_ttl`] old.
    pub(super) async fn resolution_for(
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
    pub(super) async fn with_reservations(
        &self,
        class: &EC2NodeClass,
        r: &mut NodeClassResolution,
    ) {
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

    /// `PlacementGroupReady`, as Karpenter's placement group reconciler
    /// writes it: False when the selected group is not found or cannot be
    /// resolved.
    pub(super) async fn with_placement_group(
        &self,
        class: &EC2NodeClass,
        r: &mut NodeClassResolution,
    ) {
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
    pub(super) async fn with_dependents(
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
    pub(super) async fn with_instance_profile(
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
    pub(super) async fn validation_type(
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
    pub(super) async fn validate(
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
    pub(super) async fn dry_run_launch(
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
    pub(super) async fn dry_runs(
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
}
