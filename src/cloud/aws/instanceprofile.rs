//! Instance profiles for node classes that name a role (`spec.role`), as
//! Karpenter v1.14.1 manages them (`pkg/providers/instanceprofile`,
//! `pkg/controllers/nodeclass`):
//!
//! - **Adopted** when the node class's status already names a profile
//!   that holds the role (one Karpenter made, or dovetail earlier): it is
//!   used as it is.
//! - **Created** otherwise: named `<cluster>_<20 digits>`, the digits an
//!   FNV-1a hash of the region, the class's name and uid, and the role (so
//!   a retry after a failed status write makes the same profile, and a new
//!   role a new one), under Karpenter's path
//!   `/karpenter/<region>/<cluster>/<class uid>/`, tagged as Karpenter tags
//!   it (the class's `tags`, `kubernetes.io/cluster/<cluster>=owned`,
//!   `eks:eks-cluster-name`, `karpenter.k8s.aws/ec2nodeclass`,
//!   `topology.kubernetes.io/region`), with the role added. A role IAM does
//!   not know is a problem of the node class (not ready), and the empty
//!   profile is deleted again.
//! - **Garbage-collected** by [`super::AwsProvider::cleanup_instance_profiles`]
//!   (the background work, while leading): profiles under the cluster's
//!   path that no node class's status names, that no live instance of the
//!   cluster uses, and that were not made or replaced in the last hour
//!   ([`super::AwsConfig::protected_profile_ttl`]: the status may not
//!   show a new one yet) lose their role and are deleted.
//!
//! Profiles are looked up at most every [`PROFILE_TTL`] (Karpenter's
//! `InstanceProfileTTL`).

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::time::Duration;

use super::error::{AwsError, RetrySettings, call, paginate};
use super::launch::{TAG_EKS_CLUSTER, TAG_NODECLASS, cluster_tag};
use crate::api::EC2NodeClass;
use crate::model::labels::REGION;

/// How long a profile's role is trusted without asking IAM again.
pub const PROFILE_TTL: Duration = Duration::from_secs(15 * 60);

/// `/karpenter/<region>/<cluster>/`: every profile of the cluster.
pub fn cluster_path(region: &str, cluster: &str) -> String {
    format!("/karpenter/{region}/{cluster}/")
}

/// `/karpenter/<region>/<cluster>/<uid>/`: the profiles of one node class.
pub fn class_path(region: &str, cluster: &str, uid: &str) -> String {
    format!("{}{uid}/", cluster_path(region, cluster))
}

/// The role's name: IAM's `AddRoleToInstanceProfile` takes no path.
pub fn role_name(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

/// The profile dovetail makes for `class` and `role` (see the module
/// documentation).
pub fn profile_name(cluster: &str, region: &str, class: &EC2NodeClass, role: &str) -> String {
    let mut h = fnv::FnvHasher::default();
    for part in [
        region,
        class.metadata.name.as_deref().unwrap_or_default(),
        class.metadata.uid.as_deref().unwrap_or_default(),
        role,
    ] {
        h.write(part.as_bytes());
        h.write(&[0]);
    }
    format!("{cluster}_{}", h.finish())
}

/// The tags of a profile made for `class`.
pub fn profile_tags(cluster: &str, region: &str, class: &EC2NodeClass) -> BTreeMap<String, String> {
    let mut tags = class.spec.tags.clone().unwrap_or_default();
    tags.insert(cluster_tag(cluster), "owned".to_string());
    tags.insert(TAG_EKS_CLUSTER.to_string(), cluster.to_string());
    tags.insert(
        TAG_NODECLASS.to_string(),
        class.metadata.name.clone().unwrap_or_default(),
    );
    tags.insert(REGION.to_string(), region.to_string());
    tags
}

/// Why a profile could not be made ready.
#[derive(Debug)]
pub enum EnsureError {
    /// IAM has no such role: the node class's problem.
    RoleNotFound(String),
    Aws(AwsError),
}

impl From<AwsError> for EnsureError {
    fn from(e: AwsError) -> Self {
        EnsureError::Aws(e)
    }
}

/// IAM calls on instance profiles.
pub struct Profiles<'a> {
    pub iam: &'a aws_sdk_iam::Client,
    pub retry: &'a RetrySettings,
}

fn not_found(e: &AwsError) -> bool {
    e.code() == Some("NoSuchEntity")
}

impl Profiles<'_> {
    /// The role of profile `name` (`Some(None)`: it has none), or `None`
    /// when there is no such profile.
    pub async fn role_of(&self, name: &str) -> Result<Option<Option<String>>, AwsError> {
        let iam = self.iam;
        match call(self.retry, "iam:GetInstanceProfile", || {
            iam.get_instance_profile()
                .instance_profile_name(name)
                .send()
        })
        .await
        {
            Ok(out) => Ok(Some(
                out.instance_profile()
                    .and_then(|p| p.roles().first())
                    .map(|r| r.role_name().to_string()),
            )),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Makes profile `name` exist under `path` with `tags` and hold `role`
    /// (and no other).
    pub async fn ensure(
        &self,
        name: &str,
        role: &str,
        tags: &BTreeMap<String, String>,
        path: &str,
    ) -> Result<(), EnsureError> {
        let iam = self.iam;
        let current = match self.role_of(name).await? {
            Some(current) => current,
            None => {
                let created = call(self.retry, "iam:CreateInstanceProfile", || {
                    iam.create_instance_profile()
                        .instance_profile_name(name)
                        .path(path)
                        .set_tags(Some(
                            tags.iter()
                                .filter_map(|(k, v)| {
                                    aws_sdk_iam::types::Tag::builder()
                                        .key(k)
                                        .value(v)
                                        .build()
                                        .ok()
                                })
                                .collect(),
                        ))
                        .send()
                })
                .await;
                match created {
                    Ok(_) => None,
                    // Made meanwhile (another replica, an earlier attempt).
                    Err(e) if e.code() == Some("EntityAlreadyExists") => {
                        self.role_of(name).await?.flatten()
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        let role = role_name(role);
        if current.as_deref() == Some(role) {
            return Ok(());
        }
        if let Some(other) = current {
            call(self.retry, "iam:RemoveRoleFromInstanceProfile", || {
                iam.remove_role_from_instance_profile()
                    .instance_profile_name(name)
                    .role_name(&other)
                    .send()
            })
            .await?;
        }
        let added = call(self.retry, "iam:AddRoleToInstanceProfile", || {
            iam.add_role_to_instance_profile()
                .instance_profile_name(name)
                .role_name(role)
                .send()
        })
        .await;
        match added {
            Ok(_) => Ok(()),
            Err(AwsError::Service { code, message, .. })
                if code == "NoSuchEntity" && message.to_ascii_lowercase().contains("role") =>
            {
                Err(EnsureError::RoleNotFound(message))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes profile `name`, taking its role out first. A profile that is
    /// gone is not an error.
    pub async fn delete(&self, name: &str) -> Result<(), AwsError> {
        let iam = self.iam;
        let Some(role) = self.role_of(name).await? else {
            return Ok(());
        };
        if let Some(role) = role {
            match call(self.retry, "iam:RemoveRoleFromInstanceProfile", || {
                iam.remove_role_from_instance_profile()
                    .instance_profile_name(name)
                    .role_name(&role)
                    .send()
            })
            .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        match call(self.retry, "iam:DeleteInstanceProfile", || {
            iam.delete_instance_profile()
                .instance_profile_name(name)
                .send()
        })
        .await
        {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The names of the profiles under `prefix` (checked here too: a
    /// profile of another cluster must never be taken for one of ours).
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, AwsError> {
        let iam = self.iam;
        paginate(
            self.retry,
            "iam:ListInstanceProfiles",
            |marker| {
                iam.list_instance_profiles()
                    .path_prefix(prefix)
                    .set_marker(marker)
                    .send()
            },
            |page| {
                let names = page
                    .instance_profiles()
                    .iter()
                    .filter(|p| p.path().starts_with(prefix))
                    .map(|p| p.instance_profile_name().to_string())
                    .collect();
                let next = page
                    .is_truncated()
                    .then(|| page.marker().map(str::to_string))
                    .flatten();
                (names, next)
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_paths_and_tags_are_karpenters() {
        let mut class = EC2NodeClass::test("default");
        class.metadata.uid = Some("2b1c".into());
        class.spec.tags = Some(BTreeMap::from([("team".into(), "a".into())]));
        let name = profile_name("prod", "us-east-1", &class, "NodeRole");
        assert!(name.starts_with("prod_"), "{name}");
        assert!(name.len() <= 128);
        assert_eq!(name, profile_name("prod", "us-east-1", &class, "NodeRole"));
        assert_ne!(name, profile_name("prod", "us-east-1", &class, "OtherRole"));
        let mut again = class.clone();
        again.metadata.uid = Some("9f00".into());
        assert_ne!(name, profile_name("prod", "us-east-1", &again, "NodeRole"));
        assert_eq!(
            class_path("us-east-1", "prod", "2b1c"),
            "/karpenter/us-east-1/prod/2b1c/"
        );
        assert!(
            class_path("us-east-1", "prod", "2b1c").starts_with(&cluster_path("us-east-1", "prod"))
        );
        assert_eq!(role_name("/nodes/NodeRole"), "NodeRole");
        let tags = profile_tags("prod", "us-east-1", &class);
        assert_eq!(tags["kubernetes.io/cluster/prod"], "owned");
        assert_eq!(tags["eks:eks-cluster-name"], "prod");
        assert_eq!(tags["karpenter.k8s.aws/ec2nodeclass"], "default");
        assert_eq!(tags["topology.kubernetes.io/region"], "us-east-1");
        assert_eq!(tags["team"], "a");
    }
}
