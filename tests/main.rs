//! dovetail's integration tests: one test binary (each extra binary would
//! link the whole dependency tree again), one module per suite.

mod aws;
mod aws_proxy;
mod capacity_buffer;
mod conformance;
mod dashboards;
mod deploy;
mod diff;
mod differential;
mod disruption;
mod forecast;
mod helm;
mod hostile;
mod impact;
mod interruption;
mod interruption_sim;
mod interruption_sqs;
mod karpenter_disruption;
mod karpenter_scheduling;
mod moto;
mod newcomer;
mod node_overlay;
mod node_repair;
mod plan;
mod real_cluster;
mod report_html;
mod serve;
mod simulate;
mod static_capacity;
mod support;
mod sync;
mod testbed;
mod validate;
