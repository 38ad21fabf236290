//! The in-memory API server: an API-server-like object store.
//!
//! [`MemoryCluster`] keeps typed Kubernetes objects and enforces the
//! semantics a controller relies on: resource versions and optimistic
//! concurrency, finalizers and graceful deletion, owner-reference garbage
//! collection, watch events, the eviction subresource with
//! PodDisruptionBudgets, and admission validation. `dovetail simulate` runs
//! the controller against it; unit tests use it without an async runtime.
//!
//! The store is synchronous (`&self` behind a lock), in the style of a
//! Linkerd index: logic and tests call it directly, and an async watcher
//! waits on [`MemoryCluster::subscribe`] and then reads
//! [`MemoryCluster::watch_from`].
//!
//! # Deletion
//! Deletes follow the API server's documented semantics, with
//! [`DeleteParams`](crate::cluster::DeleteParams) as `DeleteOptions`:
//! - Pods are deleted gracefully
//!   (<https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination>):
//!   a pod bound to a node and not finished gets `deletionTimestamp` = now
//!   plus its grace period and `deletionGracePeriodSeconds`, and stays (a
//!   MODIFIED event) until its kubelet deletes it with a grace period of 0
//!   once its containers stopped (the simulation's kubelet does). An
//!   unbound or finished pod, or a grace period of 0, removes it at once
//!   (finalizers still hold it). A second delete may only shorten the
//!   grace period; 0 on a terminating pod force-deletes it. A negative
//!   grace period counts as 1 s, as the API server's delete path does.
//!   Other kinds have no grace period.
//! - Propagation
//!   (<https://kubernetes.io/docs/concepts/architecture/garbage-collection/>):
//!   background removes the dependents once the owner is gone; orphan
//!   drops the owner's references from its dependents (what the garbage
//!   collector does for the `orphan` finalizer); foreground marks the
//!   owner terminating with the `foregroundDeletion` finalizer, deletes its
//!   dependents, and removes the owner once no dependent that blocks it
//!   (`blockOwnerDeletion`) is left.
//! - A dry run checks everything (preconditions, budgets for an eviction)
//!   and answers with what would happen, storing nothing.
//!
//! # Differences from a real API server
//! Deliberate, to keep the store small, fast and reproducible:
//! - Garbage collection runs inside the writes that cause it (the delete,
//!   the update that removes a last finalizer), not in a controller that
//!   catches up later; it follows owners only when an owner is removed or
//!   deleted with a propagation: an object created with references to
//!   owners that never existed is kept. The `orphan` and
//!   `foregroundDeletion` finalizers are handled within the delete rather
//!   than observed by a collector (an orphaning delete leaves no `orphan`
//!   finalizer behind).
//! - Pods get `spec.terminationGracePeriodSeconds` defaulted on create (30
//!   seconds, or [`MemoryCluster::with_default_termination_grace_period`]),
//!   the only pod default the store applies.
//! - Every kind behaves as if it had a status subresource, but create keeps
//!   the status it is given (the real server resets a pod's status), so
//!   tests and simulations can create running pods in one step.
//! - Names are only required to be non-empty, and field immutability (such
//!   as a pod's spec) is left to validators.
//! - uids and `generateName` suffixes come from a fixed sequence, so runs
//!   are reproducible.
//! - Evictions compute the PodDisruptionBudget's status from the current
//!   pods instead of reading the status a disruption controller wrote
//!   (terminating pods are not healthy, as the disruption controller
//!   counts them). The expected pods are the `spec.replicas` of the pods'
//!   controllers when those objects are stored (of any kind), otherwise one
//!   per non-terminal pod; the real controller ignores pods without a
//!   controller.
//! - Watches have no bookmarks and no selectors; watching from a future
//!   resource version returns no events rather than an error. Lists have no
//!   pagination. The served API (`world::serve`) adds all three over HTTP,
//!   on top of this store.

pub mod admission;
mod apply;
mod client;
mod memory;
mod namespaces;
mod pdb;
pub mod seam;
mod store;
#[cfg(test)]
mod tests;
mod views;

pub use memory::MemoryCluster;
pub use pdb::{BudgetPods, BudgetStatus, budget_status, healthy_pods_needed, is_pod_healthy};
pub use seam::{Access, Fault, Write};
