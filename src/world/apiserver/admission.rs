//! Admission for dovetail's kinds in [`MemoryCluster`]: the checks of
//! `dovetail validate` on every write and the transition rules (`oldSelf`)
//! on updates, as a real API server applies the CRDs' schemas and rules.

use super::MemoryCluster;
use crate::api::{ApiKind, CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use crate::cluster::{ApiError, Object};
use crate::config::validate::{self, transition};

/// The admission errors of writing `new` over `old`, as `path: message`.
pub fn check<K: Object>(kind: ApiKind, old: Option<&K>, new: &K) -> Result<(), Vec<String>> {
    let new_v = serde_json::to_value(new).map_err(|e| vec![e.to_string()])?;
    let mut errors = validate::check_object(kind, &new_v);
    if let Some(old) = old {
        let old_v = serde_json::to_value(old).map_err(|e| vec![e.to_string()])?;
        errors.extend(
            transition::check(kind, &old_v, &new_v)
                .into_iter()
                .map(|f| format!("{}: {}", f.path, f.message)),
        );
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Registers [`check`] for NodePools, EC2NodeClasses and NodeClaims.
pub fn register(cluster: &MemoryCluster) -> Result<(), ApiError> {
    cluster.add_validator::<NodePool>(|old: Option<&NodePool>, new: &NodePool| {
        check(ApiKind::NodePool, old, new)
    })?;
    cluster.add_validator::<EC2NodeClass>(|old: Option<&EC2NodeClass>, new: &EC2NodeClass| {
        check(ApiKind::EC2NodeClass, old, new)
    })?;
    cluster.add_validator::<NodeClaim>(|old: Option<&NodeClaim>, new: &NodeClaim| {
        check(ApiKind::NodeClaim, old, new)
    })?;
    cluster.add_validator::<NodeOverlay>(|old: Option<&NodeOverlay>, new: &NodeOverlay| {
        check(ApiKind::NodeOverlay, old, new)
    })?;
    cluster.add_validator::<CapacityBuffer>(|old: Option<&CapacityBuffer>, new: &CapacityBuffer| {
        check(ApiKind::CapacityBuffer, old, new)
    })
}
