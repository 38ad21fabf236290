//! The AWS provider's periodic work, as Karpenter's controllers do it
//! beside the launches ([`AwsProvider::run_background`]):
//!
//! - **Instance types and prices** are read again when older than their
//!   TTLs (5 minutes, 12 hours for on-demand prices, 1 hour for spot), so
//!   launches and solves never wait for the Pricing API; while this runs,
//!   [`AwsProvider`] no longer refreshes them inline.
//! - **The Kubernetes version** is read again every
//!   [`AwsConfig::kubernetes_version_ttl`] (5 minutes, Karpenter's version
//!   provider): after a control-plane upgrade, AMI aliases resolve to the
//!   new version's images, and nodes drift onto them.
//! - **Instances are tagged** `Name=<node name>` (with
//!   `karpenter.sh/nodeclaim` and `eks:eks-cluster-name` where missing)
//!   once their node registers, as Karpenter's `nodeclaim.tagging`
//!   controller does, while this replica leads; each instance once per
//!   process ([`AwsProvider::tag_registered`]).
//! - **Launch templates** of this cluster whose node class is gone or no
//!   longer resolves to their image are deleted every
//!   [`AwsConfig::launch_template_cleanup_interval`], while this replica
//!   leads ([`Background::nodeclasses`] answers `None` otherwise).
//! - **Instance profiles** made for node classes' roles that no node class
//!   nor instance uses any more are deleted at the same pace
//!   ([`super::instanceprofile`]).
//!
//! Each pass logs what failed and goes on; nothing here stops a launch.
//!
//! [`AwsConfig::kubernetes_version_ttl`]: super::AwsConfig::kubernetes_version_ttl
//! [`AwsConfig::launch_template_cleanup_interval`]: super::AwsConfig::launch_template_cleanup_interval

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::AwsProvider;
use crate::api::EC2NodeClass;

/// Reads the cluster's Kubernetes version (`MAJOR.MINOR`), e.g. from the
/// API server ([`super::kubernetes_version`]).
pub type VersionSource =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>> + Send + Sync>;

/// What the background work reads from outside the provider.
pub struct Background {
    /// The cluster's Kubernetes version; `None` keeps the configured one.
    pub kubernetes_version: Option<VersionSource>,
    /// The cluster's EC2NodeClasses while this replica may delete what
    /// they no longer use (it leads, its caches are synced); `None`
    /// otherwise.
    pub nodeclasses: Box<dyn Fn() -> Option<Vec<EC2NodeClass>> + Send + Sync>,
    /// The NodeClaims whose node registered, while this replica leads
    /// (empty otherwise): their instances get the `Name` tag.
    pub registered: Box<dyn Fn() -> Vec<Registered> + Send + Sync>,
}

/// A NodeClaim whose node registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub nodeclaim: String,
    pub provider_id: String,
    pub node_name: String,
}

/// When each kind of work is next due.
#[derive(Debug, Default)]
struct Due {
    version: Option<Instant>,
    cleanup: Option<Instant>,
}

impl AwsProvider {
    /// Runs the periodic work (see the module documentation) until `stop`
    /// completes. One per provider.
    pub async fn run_background(&self, work: Background, stop: impl Future<Output = ()>) {
        self.background.store(true, Ordering::Relaxed);
        let mut due = Due::default();
        tokio::pin!(stop);
        loop {
            self.background_pass(&work, &mut due).await;
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep(self.config.background_tick) => {}
            }
        }
        self.background.store(false, Ordering::Relaxed);
    }

    async fn background_pass(&self, work: &Background, due: &mut Due) {
        let now = Instant::now();
        if let Err(e) = self.refresh().await {
            tracing::warn!(error = %e, "refreshing instance types and prices");
        }
        if let Some(source) = &work.kubernetes_version
            && due.version.is_none_or(|d| now >= d)
        {
            due.version = Some(now + self.config.kubernetes_version_ttl);
            match source().await {
                Ok(v) => self.set_kubernetes_version(&v),
                Err(e) => tracing::warn!(error = %e, "reading the Kubernetes version"),
            }
        }
        let registered = (work.registered)();
        if !registered.is_empty() {
            match self.tag_registered(&registered).await {
                Ok(tagged) if !tagged.is_empty() => {
                    tracing::info!(instances = ?tagged, "tagged instances with their node's name");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "tagging instances with their node's name"),
            }
        }
        if due.cleanup.is_none_or(|d| now >= d)
            && let Some(classes) = (work.nodeclasses)()
        {
            due.cleanup = Some(now + self.config.launch_template_cleanup_interval);
            match self.cleanup_launch_templates(&classes).await {
                Ok(deleted) if !deleted.is_empty() => {
                    tracing::info!(templates = ?deleted, "deleted launch templates no node class uses");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "cleaning up launch templates"),
            }
            match self.cleanup_instance_profiles(&classes).await {
                Ok(deleted) if !deleted.is_empty() => {
                    tracing::info!(profiles = ?deleted, "deleted instance profiles no node class uses");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "cleaning up instance profiles"),
            }
        }
    }
}
