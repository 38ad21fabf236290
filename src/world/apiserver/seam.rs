//! What [`super::MemoryCluster`] records of, and injects into, the requests
//! the controller makes through the [`crate::cluster::Cluster`] interface:
//!
//! - **the access log**: every write, as RBAC names it ([`Access`]: verb,
//!   group, resource, subresource), so a test can check that the
//!   deployment's role grants everything the controller did;
//! - **faults** ([`Fault`]): a write that fails with a given error instead
//!   of being carried out, the seam through which tests and simulations
//!   inject server errors, and crashes between two writes (a launch
//!   recorded on the cloud whose NodeClaim status write never happens).
//!
//! Only the [`crate::cluster::Cluster`] implementation goes through here; the
//! in-memory server's own methods (which the simulation's kubelet,
//! scheduler and workload controllers call) are neither logged nor faulted.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use crate::cluster::{ApiError, Object};

/// One kind of request, as an RBAC rule names what it allows.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Access {
    /// `get`, `list`, `watch`, `create`, `update`, `patch` or `delete`.
    pub verb: String,
    /// The API group; empty for the core group.
    pub group: String,
    /// The plural resource name, with `/subresource` when there is one
    /// (`pods/eviction`, `nodeclaims/status`).
    pub resource: String,
}

impl Access {
    pub fn new(verb: &str, group: &str, resource: &str) -> Self {
        Access {
            verb: verb.to_string(),
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }

    /// `verb` on kind `K`'s resource, or on its `subresource`.
    pub fn of<K: Object>(verb: &str, subresource: Option<&str>) -> Self {
        let plural = K::plural(&());
        let resource = match subresource {
            Some(sub) => format!("{plural}/{sub}"),
            None => plural.into_owned(),
        };
        Access::new(verb, &K::group(&()), &resource)
    }
}

impl fmt::Display for Access {
    /// `verb resource.group`, as `kubectl auth can-i` takes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{} {}", self.verb, self.resource)
        } else {
            let (resource, sub) = match self.resource.split_once('/') {
                Some((r, s)) => (r, format!("/{s}")),
                None => (self.resource.as_str(), String::new()),
            };
            write!(f, "{} {resource}.{}{sub}", self.verb, self.group)
        }
    }
}

/// The writes of the [`crate::cluster::Cluster`] interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    Create,
    Replace,
    ReplaceStatus,
    Delete,
    Apply,
    Evict,
}

/// A condition on the object of a write (as JSON).
type Condition = Box<dyn Fn(&Value) -> bool + Send + Sync>;

/// A write that fails instead of being carried out. See the module
/// documentation.
pub struct Fault {
    write: Write,
    kind: String,
    error: ApiError,
    times: usize,
    when: Option<Condition>,
}

impl fmt::Debug for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fault")
            .field("write", &self.write)
            .field("kind", &self.kind)
            .field("error", &self.error)
            .field("times", &self.times)
            .finish_non_exhaustive()
    }
}

impl Fault {
    /// The next `write` of an object of kind `kind` (`NodeClaim`; `Pod`
    /// for evictions) fails with `error`.
    pub fn new(write: Write, kind: &str, error: ApiError) -> Self {
        Fault {
            write,
            kind: kind.to_string(),
            error,
            times: 1,
            when: None,
        }
    }

    /// The next `n` matching writes fail, not only the next one.
    pub fn times(mut self, n: usize) -> Self {
        self.times = n;
        self
    }

    /// Only writes whose object (as JSON; for a delete or an eviction,
    /// `{"metadata": {"namespace", "name"}}`) passes `f` match.
    pub fn when(mut self, f: impl Fn(&Value) -> bool + Send + Sync + 'static) -> Self {
        self.when = Some(Box::new(f));
        self
    }
}

/// The access log and the armed faults of one in-memory server.
#[derive(Clone, Default)]
pub(super) struct Seam {
    accesses: Arc<Mutex<BTreeMap<Access, u64>>>,
    faults: Arc<Mutex<Vec<Fault>>>,
}

impl Seam {
    pub(super) fn log(&self, access: Access) {
        *self
            .accesses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(access)
            .or_default() += 1;
    }

    pub(super) fn accesses(&self) -> BTreeMap<Access, u64> {
        self.accesses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn arm(&self, fault: Fault) {
        self.faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(fault);
    }

    /// The error of the first armed fault that matches this write, which
    /// is then used up once. `object` is serialised only when a fault of
    /// this write and kind has a condition.
    pub(super) fn fault(
        &self,
        write: Write,
        kind: &str,
        object: impl FnOnce() -> Value,
    ) -> Option<ApiError> {
        let mut faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        let matching = |f: &Fault| f.write == write && f.kind == kind && f.times > 0;
        if !faults.iter().any(matching) {
            return None;
        }
        let value = if faults.iter().any(|f| matching(f) && f.when.is_some()) {
            object()
        } else {
            Value::Null
        };
        let hit = faults
            .iter()
            .position(|f| matching(f) && f.when.as_ref().is_none_or(|w| w(&value)))?;
        let fault = &mut faults[hit];
        fault.times -= 1;
        let error = fault.error.clone();
        faults.retain(|f| f.times > 0);
        Some(error)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::api::NodeClaim;

    #[test]
    fn accesses_read_as_rbac_names_them() {
        assert_eq!(
            Access::of::<NodeClaim>("update", Some("status")).to_string(),
            "update nodeclaims.karpenter.sh/status"
        );
        assert_eq!(
            Access::of::<Pod>("create", Some("eviction")).to_string(),
            "create pods/eviction"
        );
    }

    #[test]
    fn a_fault_matches_its_write_kind_and_condition_as_often_as_armed() {
        let seam = Seam::default();
        let error = ApiError::Internal {
            message: "injected".into(),
        };
        seam.arm(
            Fault::new(Write::ReplaceStatus, "NodeClaim", error.clone())
                .times(2)
                .when(|o| o.pointer("/status/providerID").is_some()),
        );
        let launched = || serde_json::json!({"status": {"providerID": "x"}});
        assert_eq!(seam.fault(Write::Replace, "NodeClaim", launched), None);
        assert_eq!(seam.fault(Write::ReplaceStatus, "Node", launched), None);
        assert_eq!(
            seam.fault(Write::ReplaceStatus, "NodeClaim", || serde_json::json!({})),
            None
        );
        assert_eq!(
            seam.fault(Write::ReplaceStatus, "NodeClaim", launched),
            Some(error.clone())
        );
        assert_eq!(
            seam.fault(Write::ReplaceStatus, "NodeClaim", launched),
            Some(error)
        );
        assert_eq!(
            seam.fault(Write::ReplaceStatus, "NodeClaim", launched),
            None
        );
    }
}
