//! dovetail: a node autoscaler for EKS that speaks the Karpenter v1 API and is
//! driven by a git repository of configuration.
//!
//! See `ARCHITECTURE.md` for the module map and the direction of dependencies.
#![forbid(unsafe_code)]

pub mod api;
pub mod buffers;
pub mod cli;
pub mod clock;
pub mod cloud;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod convert;
pub mod diag;
pub mod disruption;
pub mod drift;
pub mod fsutil;
#[doc(hidden)]
pub mod fuzzing;
pub mod interruption;
pub mod metrics;
pub mod model;
pub mod par;
pub mod plan;
pub mod scheduling;
pub mod simulate;
pub mod snapshot;
pub mod sync;
#[cfg(test)]
pub(crate) mod testing;
pub mod timing;
pub mod world;
