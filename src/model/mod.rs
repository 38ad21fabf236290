//! The pure domain model of scheduling: resources, requirements, taints,
//! instance types and offerings. No I/O, no kube client, no AWS SDK
//! (except [`catalog`], which reads catalog files).
//!
//! The catalog format is documented in `docs/catalog.md`.

pub mod catalog;
pub mod instance_type;
pub mod labels;
pub mod overlay;
pub mod quantity;
pub mod requirements;
pub mod resources;
pub mod taints;

pub use instance_type::{InstanceType, KubeletSettings, Offering, Overhead, Reservation};
pub use labels::LabelSelector;
pub use requirements::{Operator, Requirement, Requirements};
pub use resources::Resources;
pub use taints::{Effect, Taint, Toleration};
