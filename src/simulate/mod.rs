//! `dovetail simulate`: the controller against an in-memory cluster and a
//! simulated EC2 on a virtual clock.

pub mod commit;
pub mod driver;
pub mod forecast;
pub mod html;
pub mod kubelet;
pub mod kubescheduler;
pub mod report;
pub mod scenario;
pub mod snapshot;
pub mod volumes;
pub mod workloads;
