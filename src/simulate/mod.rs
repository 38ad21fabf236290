//! `dovetail simulate`: the controller against an in-memory cluster and a
//! simulated EC2 on a virtual clock.
//!
//! The parts:
//! - `scenario`: the scenario file (`docs/simulate.md`,
//!   `schemas/scenario.schema.json`);
//! - `driver`: `Simulation`, the loop on a `clock::ManualClock` that runs
//!   `controller::pass` (as `dovetail controller` does) after every step,
//!   against the simulated world (`crate::world`): `world::MemoryCluster`,
//!   `world::ec2::SimEc2`, and the stand-ins for the rest of a cluster,
//!   `world::kubescheduler`, `world::kubelet` (which also stops terminating
//!   pods), `world::workloads` (Deployment, ReplicaSet, StatefulSet and Job
//!   controllers) and `world::volumes` (the attach-detach controller, after
//!   the scenario's `cloud.volumeAttachDelay` and `cloud.volumeDetachDelay`);
//! - `commit`: the `commit` step, through the same `sync` engine as
//!   `dovetail sync`;
//! - `report` (JSON and text), `html` (one self-contained page) and
//!   `snapshot` (`--snapshot-out`);
//! - `forecast`: `diff --forecast`.
//!
//! The stand-ins are not the judge: `testbed/` (Go, outside the crate) builds
//! a real control plane (etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler, KWOK) and a registrar that registers each instance's Node
//! from its own user data, as a kubelet would. `tests/real_cluster.rs` runs
//! the production binary on it under the installed RBAC, and
//! `tests/differential.rs` compares `validate`, the in-memory admission and
//! the served API with the real API server (`docs/differential.md`).

pub mod commit;
pub mod driver;
pub mod forecast;
pub mod html;
pub mod report;
pub mod scenario;
pub mod snapshot;
