//! The simulated world: everything that stands in for a real component, in
//! one place, so a reader sees where production ends.
//!
//! - `apiserver`: [`MemoryCluster`], the in-memory API server (resource
//!   versions, finalizers, garbage collection, watches, PDB-aware eviction,
//!   admission for dovetail's kinds, the Namespaces objects live in), and
//!   the seam through which tests inject faults into its writes;
//! - `serve`: its HTTP face, a Kubernetes API for kubectl and the production
//!   controller (`simulate --serve`), with `faults` on demand;
//! - `ec2`: `SimEc2`, a deterministic EC2 (a catalog's types and prices,
//!   launch delays, scripted capacity errors and interruptions);
//! - `kwok`: `KwokProvider`, the simulated EC2's capacity as Nodes that KWOK
//!   keeps alive, for `--cloud kwok` on a real control plane;
//! - `kubescheduler`, `kubelet`, `workloads` and `volumes`: stand-ins for
//!   kube-scheduler, the kubelets, the workload controllers and the
//!   attach-detach controller.
//!
//! `simulate` runs the controller in this world on a virtual clock; `cli`
//! chooses it when asked for a simulated part (`simulate`, `--cloud kwok`).
//! The controller, sync and the adapters never use it: `tests/layers.rs`
//! checks that only `simulate`, `cli` and `fuzzing` do. The stand-ins are not the judge: `testbed/` builds the real
//! control plane, and `tests/differential.rs` compares the two.

pub mod apiserver;
pub mod ec2;
pub mod faults;
pub mod kubelet;
pub mod kubescheduler;
pub mod kwok;
pub mod serve;
pub mod volumes;
pub mod workloads;

pub use apiserver::{Access, Fault, MemoryCluster, Write};
