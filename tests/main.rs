//! dovetail's integration tests: one test binary (each extra binary would
//! link the whole dependency tree again), one module per suite.

mod aws;
mod aws_faults;
mod aws_proxy;
mod capacity_buffer;
mod conformance;
mod crash_steps;
mod dashboards;
mod deploy;
mod diff;
mod differential;
mod disruption;
mod forecast;
mod fuzz_corpus;
mod helm;
mod hostile;
mod impact;
mod interruption;
mod interruption_sim;
mod interruption_sqs;
mod karpenter_disruption;
mod karpenter_scheduling;
mod kwok;
mod layers;
mod lifecycle;
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
mod volumes;

/// Whether the tests run as CI runs them (`CI=true`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// A tool or an input a test needs is missing. Under `CI=true` the test
/// fails, naming it: CI installs everything the tests use, so a test never
/// passes there without checking anything. Elsewhere it says so loudly and
/// the caller returns without checking.
pub fn missing(what: &str) {
    assert!(!in_ci(), "CI=true and {what}");
    eprintln!("\n*** NOT RUN: {what} ***\n");
}
