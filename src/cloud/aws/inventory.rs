//! Inventory and clean-up: DescribeInstances, the `Name` tag of
//! registered instances, capacity given back to reservations, and the
//! launch templates and instance profiles no node class uses any more.

use super::*;

impl AwsProvider {
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
    pub(super) async fn instance_profiles_in_use(&self) -> Result<BTreeSet<String>, CloudError> {
        let ec2 = &self.ec2;
        let filters = self.live_instance_filters(&[]);
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

    pub(super) fn labels_of(
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
    pub(super) async fn describe_instances(
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

    pub(super) async fn describe(
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
    pub(super) fn reservation_freed(&self, instance_id: &str) {
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
