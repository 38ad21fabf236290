//! What the prometheus registries of the sync engine, the controller and the
//! interruption poller share. Each owns its registry (not the process-global
//! default), so engines, controllers and tests are independent; the process
//! serving `/metrics` gathers them together.
//!
//! - [`summary`]: the reference's summaries (quantiles over a window of
//!   time read from an injected clock), which the `prometheus` crate lacks;
//! - [`exposition`]: the text formats, and snapshots over a run as one
//!   timestamped OpenMetrics file.
//!
//! `register` adds a new metric to the registry its owner keeps. The summaries
//! report the count, the sum and the quantiles 0, 0.5, 0.9, 0.99 and 1 over the
//! last ten minutes; the exposition sorts the families, and a `Series` keeps
//! each label set's text once.

pub mod exposition;
pub mod summary;

pub use summary::SummaryVec;

use prometheus::Registry;
use prometheus::core::Collector;

/// Registers a newly made metric in `registry` and hands it back.
///
/// Panics if the metric's options are invalid or its name is taken: both are
/// fixed in the code, and each module's tests gather its registry.
pub fn register<C>(registry: &Registry, made: prometheus::Result<C>) -> C
where
    C: Collector + Clone + 'static,
{
    let metric = made.expect("valid metric options");
    registry
        .register(Box::new(metric.clone()))
        .expect("metric names are unique in a registry");
    metric
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{IntCounter, Opts};

    #[test]
    fn a_registered_metric_is_gathered_with_its_value() {
        let registry = Registry::new();
        let counter = register(&registry, IntCounter::new("a_total", "A counter."));
        counter.inc_by(3);
        let families = registry.gather();
        assert_eq!(families.len(), 1);
        assert_eq!(families[0].name(), "a_total");
        assert_eq!(families[0].get_metric()[0].get_counter().get_value(), 3.0);
    }

    #[test]
    #[should_panic(expected = "metric names are unique")]
    fn a_name_registered_twice_panics() {
        let registry = Registry::new();
        register(&registry, IntCounter::with_opts(Opts::new("a_total", "A.")));
        register(&registry, IntCounter::with_opts(Opts::new("a_total", "A.")));
    }
}
