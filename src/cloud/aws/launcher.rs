//! Launching: launch templates created on first use and reused, and
//! CreateFleet, with identical plans batched into one call.

use super::*;

pub(super) type LaunchResult = Result<(FleetInstance, Vec<OfferingKey>), CloudError>;

/// Launches waiting to share a CreateFleet call.
#[derive(Default)]
pub(super) struct Pending {
    claims: Vec<(String, oneshot::Sender<LaunchResult>)>,
}

/// Removes an open batch if its leader goes away before sending it, so
/// the others waiting on it fail instead of waiting forever.
pub(super) struct BatchGuard<'a> {
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

impl AwsProvider {
    /// The id of the launch template named `name`, if it exists.
    pub(super) async fn template_id(&self, name: &str) -> Result<Option<String>, error::AwsError> {
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
    pub(super) fn template_request(
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
    pub(super) async fn ensure_template(
        &self,
        spec: &launch::TemplateSpec,
    ) -> Result<String, CloudError> {
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
    pub(super) async fn launch_fleet(
        &self,
        plan: &LaunchPlan,
        claims: &[String],
    ) -> Vec<LaunchResult> {
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
    pub(super) fn fleet_request(
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

    pub(super) async fn create_fleet(
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
    pub(super) async fn launch_batched(&self, plan: &LaunchPlan, claim: &str) -> LaunchResult {
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
}
