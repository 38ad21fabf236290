//! A Prometheus summary, as the reference autoscaler's Go client keeps it:
//! a running count and sum, and quantiles over the observations of the last
//! [`MAX_AGE`] (NaN when there are none), read from an injected clock so
//! that the simulation's virtual time ages them as a cluster's time would.
//!
//! The `prometheus` crate has no summary type. The Go client estimates its
//! quantiles within an error of 0.01 ([`OBJECTIVES`]); this one keeps the
//! observations of the window (at most [`MAX_WINDOW`] of them, the oldest
//! dropped first) and reports them exactly.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto;

use crate::clock::{Clock, Timestamp};

/// The reference's summary objectives: these quantiles, each within 0.01.
pub const OBJECTIVES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];
/// The Go client's default `MaxAge`: quantiles cover the observations of
/// the last ten minutes.
pub const MAX_AGE: Duration = Duration::from_secs(10 * 60);
/// At most this many observations are kept per series for the quantiles.
pub const MAX_WINDOW: usize = 100_000;

#[derive(Debug, Default)]
struct Series {
    window: VecDeque<(Timestamp, f64)>,
    sum: f64,
    count: u64,
}

impl Series {
    fn expire(&mut self, now: Timestamp) {
        while let Some((t, _)) = self.window.front() {
            let age = Duration::try_from(now.duration_since(*t)).unwrap_or_default();
            if age <= MAX_AGE {
                break;
            }
            self.window.pop_front();
        }
    }

    /// The quantiles of the window: for `q`, the value at rank ⌈q·n⌉ (the
    /// smallest for 0, the largest for 1).
    fn quantiles(&self) -> Vec<(f64, f64)> {
        let mut values: Vec<f64> = self.window.iter().map(|(_, v)| *v).collect();
        values.sort_by(f64::total_cmp);
        OBJECTIVES
            .iter()
            .map(|&q| {
                let v = if values.is_empty() {
                    f64::NAN
                } else {
                    let rank = (q * values.len() as f64).ceil() as usize;
                    values[rank.clamp(1, values.len()) - 1]
                };
                (q, v)
            })
            .collect()
    }
}

/// A summary with labels; clones share the series.
#[derive(Clone)]
pub struct SummaryVec {
    desc: Desc,
    labels: Vec<String>,
    clock: Arc<dyn Clock>,
    series: Arc<Mutex<BTreeMap<Vec<String>, Series>>>,
}

impl std::fmt::Debug for SummaryVec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummaryVec")
            .field("name", &self.desc.fq_name)
            .finish_non_exhaustive()
    }
}

impl SummaryVec {
    /// A summary named `name` with the variable labels `labels`, aged by
    /// `clock`.
    pub fn new(
        name: &str,
        help: &str,
        labels: &[&str],
        clock: Arc<dyn Clock>,
    ) -> prometheus::Result<Self> {
        let labels: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        Ok(SummaryVec {
            desc: Desc::new(name.into(), help.into(), labels.clone(), Default::default())?,
            labels,
            clock,
            series: Arc::new(Mutex::new(BTreeMap::new())),
        })
    }

    /// Records `value` for the series of `values` (one per label, in order)
    /// at the clock's time.
    pub fn observe(&self, values: &[&str], value: f64) {
        debug_assert_eq!(values.len(), self.labels.len(), "one value per label");
        let now = self.clock.now();
        let mut all = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let s = all
            .entry(values.iter().map(|v| v.to_string()).collect())
            .or_default();
        s.count += 1;
        s.sum += value;
        s.window.push_back((now, value));
        if s.window.len() > MAX_WINDOW {
            s.window.pop_front();
        }
    }

    /// How many observations the series of `values` has had.
    pub fn sample_count(&self, values: &[&str]) -> u64 {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        let all = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        all.get(&key).map_or(0, |s| s.count)
    }
}

impl Collector for SummaryVec {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<proto::MetricFamily> {
        let now = self.clock.now();
        let mut all = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let mut metrics = Vec::with_capacity(all.len());
        for (values, s) in all.iter_mut() {
            s.expire(now);
            let mut summary = proto::Summary::default();
            summary.set_sample_count(s.count);
            summary.set_sample_sum(s.sum);
            summary.set_quantile(
                s.quantiles()
                    .into_iter()
                    .map(|(q, v)| {
                        let mut quantile = proto::Quantile::default();
                        quantile.set_quantile(q);
                        quantile.set_value(v);
                        quantile
                    })
                    .collect(),
            );
            let mut m = proto::Metric::from_label(
                self.labels
                    .iter()
                    .zip(values)
                    .map(|(n, v)| {
                        let mut pair = proto::LabelPair::default();
                        pair.set_name(n.clone());
                        pair.set_value(v.clone());
                        pair
                    })
                    .collect(),
            );
            m.set_summary(summary);
            metrics.push(m);
        }
        let mut family = proto::MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(proto::MetricType::SUMMARY);
        family.set_metric(metrics);
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use prometheus::Registry;

    fn at(clock: &ManualClock, secs: u64) {
        clock
            .set(
                Timestamp::UNIX_EPOCH
                    .checked_add(Duration::from_secs(secs))
                    .unwrap(),
            )
            .unwrap();
    }

    fn quantiles(s: &SummaryVec) -> Vec<(f64, f64)> {
        let families = s.collect();
        let m = &families[0].get_metric()[0];
        m.get_summary()
            .get_quantile()
            .iter()
            .map(|q| (q.quantile(), q.value()))
            .collect()
    }

    #[test]
    fn quantiles_cover_the_last_ten_minutes_and_count_and_sum_everything() {
        let clock = ManualClock::new(Timestamp::UNIX_EPOCH);
        let s = SummaryVec::new("x_seconds", "X.", &["nodepool"], Arc::new(clock.clone())).unwrap();
        for v in 1..=100 {
            s.observe(&["a"], f64::from(v));
        }
        assert_eq!(
            quantiles(&s),
            vec![
                (0.0, 1.0),
                (0.5, 50.0),
                (0.9, 90.0),
                (0.99, 99.0),
                (1.0, 100.0)
            ]
        );
        at(&clock, 300);
        s.observe(&["a"], 1000.0);
        // Ten minutes after the first hundred, only the last is left.
        at(&clock, 601);
        assert!(quantiles(&s).iter().all(|(_, v)| *v == 1000.0));
        // Then none: NaN, as the Go client reports an empty window.
        at(&clock, 901);
        assert!(quantiles(&s).iter().all(|(_, v)| v.is_nan()));
        let families = s.collect();
        let m = families[0].get_metric()[0].get_summary();
        assert_eq!((m.sample_count(), m.sample_sum()), (101, 6050.0));
        assert_eq!(s.sample_count(&["a"]), 101);
        assert_eq!(s.sample_count(&["b"]), 0);
    }

    #[test]
    fn a_registered_summary_is_exposed_with_its_quantile_labels() {
        let clock = ManualClock::new(Timestamp::UNIX_EPOCH);
        let registry = Registry::new();
        let s = crate::metrics::register(
            &registry,
            SummaryVec::new("x_seconds", "X.", &[], Arc::new(clock)),
        );
        s.observe(&[], 2.5);
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        assert!(text.contains("# TYPE x_seconds summary"), "{text}");
        assert!(text.contains("x_seconds{quantile=\"0.99\"} 2.5"), "{text}");
        assert!(text.contains("x_seconds_count 1"), "{text}");
    }
}
