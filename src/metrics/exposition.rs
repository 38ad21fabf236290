//! Writing gathered metric families: the Prometheus text format (what
//! `/metrics` serves, and `simulate --metrics` writes at the end of a run),
//! and [`Series`], snapshots taken over a run written as one OpenMetrics
//! text file with a timestamp on every sample (`simulate --metrics-every`),
//! the input of `promtool tsdb create-blocks-from openmetrics`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Write};

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

use crate::clock::Timestamp;

/// Orders the families by name and each family's metrics by their labels,
/// so that the same state always gives the same text.
pub fn sort(families: &mut [MetricFamily]) {
    families.sort_by(|a, b| a.name().cmp(b.name()));
    for f in families {
        f.mut_metric().sort_by(|a, b| {
            let key = |m: &Metric| -> Vec<(String, String)> {
                m.get_label()
                    .iter()
                    .map(|l| (l.name().to_string(), l.value().to_string()))
                    .collect()
            };
            key(a).cmp(&key(b))
        });
    }
}

/// Adds `labels` to every metric that does not have them already, as a
/// scrape adds its target's labels (`job`, `cluster`) with
/// `honor_labels`: a metric's own value of a label wins.
pub fn add_labels(families: &mut [MetricFamily], labels: &[(String, String)]) {
    if labels.is_empty() {
        return;
    }
    for f in families {
        for m in f.mut_metric() {
            let mut pairs = m.take_label();
            for (name, value) in labels {
                if !pairs.iter().any(|p| p.name() == name) {
                    let mut p = LabelPair::default();
                    p.set_name(name.clone());
                    p.set_value(value.clone());
                    pairs.push(p);
                }
            }
            pairs.sort_by(|a, b| a.name().cmp(b.name()));
            m.set_label(pairs);
        }
    }
}

/// The Prometheus text format (0.0.4) of `families`.
pub fn text(families: &[MetricFamily]) -> String {
    prometheus::TextEncoder::new()
        .encode_to_string(families)
        .unwrap_or_else(|e| format!("# metrics could not be encoded: {e}\n"))
}

/// A float as OpenMetrics writes it.
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else if v == v.trunc() && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

/// A bucket bound or quantile as a label value, as the Prometheus text
/// format writes it (`1`, `0.005`, `+Inf`): dashboards select
/// `quantile="1"` and `le="1"`, and Prometheus before 3.0 compares label
/// values as text.
fn label_float(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".into()
    } else {
        format!("{v}")
    }
}

fn escape_value(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

/// `{a="1",b="2"}` with `extra` last; empty without labels.
fn labels(pairs: &[LabelPair], extra: Option<(&str, &str)>) -> String {
    let mut out = String::new();
    let all = pairs
        .iter()
        .map(|p| (p.name(), p.value()))
        .chain(extra)
        .collect::<Vec<_>>();
    if all.is_empty() {
        return out;
    }
    out.push('{');
    for (i, (n, v)) in all.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{n}=\"{}\"", escape_value(v));
    }
    out.push('}');
    out
}

/// The shape of one metric's point: which samples it has.
#[derive(Debug, Clone, PartialEq)]
enum Shape {
    /// One value (counter, gauge, unknown).
    Single,
    /// Bucket upper bounds, then count and sum.
    Histogram(Vec<f64>),
    /// Quantiles, then count and sum.
    Summary(Vec<f64>),
}

/// One metric (a label set) of a family over the snapshots.
#[derive(Debug, Clone)]
struct Track {
    labels: Vec<LabelPair>,
    shape: Shape,
    /// Per snapshot: its time (milliseconds) and values in the shape's
    /// order.
    points: Vec<(i64, Vec<f64>)>,
}

#[derive(Debug, Clone)]
struct Family {
    kind: MetricType,
    help: String,
    /// By the label set's text.
    tracks: BTreeMap<String, Track>,
}

/// Snapshots of metric families over a run, written at the end as one
/// OpenMetrics text: each family once (`# TYPE`, `# HELP`), each of its
/// metrics once with its points in time order, every sample with its
/// timestamp in seconds, and `# EOF`. A metric that disappears (a node
/// gone) simply has no later points; each snapshot holds one point per
/// metric present then. Each label set's text is kept once, so memory grows
/// with the number of series and, per point, by its values only.
#[derive(Debug, Default, Clone)]
pub struct Series {
    families: BTreeMap<String, Family>,
    snapshots: usize,
}

impl Series {
    pub fn new() -> Self {
        Series::default()
    }

    /// How many snapshots were added.
    pub fn snapshots(&self) -> usize {
        self.snapshots
    }

    /// Adds the families gathered at `t`.
    pub fn add(&mut self, families: &[MetricFamily], t: Timestamp) {
        self.snapshots += 1;
        let ms = t.as_millisecond();
        for f in families {
            let family = self
                .families
                .entry(f.name().to_string())
                .or_insert_with(|| Family {
                    kind: f.get_field_type(),
                    help: f.help().to_string(),
                    tracks: BTreeMap::new(),
                });
            for m in f.get_metric() {
                let (shape, values) = match f.get_field_type() {
                    MetricType::COUNTER => (Shape::Single, vec![m.get_counter().get_value()]),
                    MetricType::GAUGE => (Shape::Single, vec![m.get_gauge().get_value()]),
                    // No registry here makes untyped metrics.
                    MetricType::UNTYPED => continue,
                    MetricType::HISTOGRAM => {
                        let h = m.get_histogram();
                        let bounds = h.get_bucket().iter().map(|b| b.upper_bound()).collect();
                        let mut v: Vec<f64> = h
                            .get_bucket()
                            .iter()
                            .map(|b| b.cumulative_count() as f64)
                            .collect();
                        v.push(h.get_sample_count() as f64);
                        v.push(h.get_sample_sum());
                        (Shape::Histogram(bounds), v)
                    }
                    MetricType::SUMMARY => {
                        let s = m.get_summary();
                        let qs = s.get_quantile().iter().map(|q| q.quantile()).collect();
                        let mut v: Vec<f64> = s.get_quantile().iter().map(|q| q.value()).collect();
                        v.push(s.sample_count() as f64);
                        v.push(s.sample_sum());
                        (Shape::Summary(qs), v)
                    }
                };
                let key = labels(m.get_label(), None);
                let track = family.tracks.entry(key).or_insert_with(|| Track {
                    labels: m.get_label().to_vec(),
                    shape: shape.clone(),
                    points: Vec::new(),
                });
                // A histogram's buckets are fixed when it is made; a point
                // of another shape cannot be written as this metric's.
                if track.shape == shape {
                    track.points.push((ms, values));
                }
            }
        }
    }

    /// Writes the OpenMetrics text.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        for (name, f) in &self.families {
            // OpenMetrics names a counter family without its `_total`.
            let (family, kind) = match f.kind {
                MetricType::COUNTER => match name.strip_suffix("_total") {
                    Some(base) => (base, "counter"),
                    None => (name.as_str(), "unknown"),
                },
                MetricType::GAUGE => (name.as_str(), "gauge"),
                MetricType::HISTOGRAM => (name.as_str(), "histogram"),
                MetricType::SUMMARY => (name.as_str(), "summary"),
                MetricType::UNTYPED => (name.as_str(), "unknown"),
            };
            writeln!(out, "# TYPE {family} {kind}")?;
            if !f.help.is_empty() {
                let help = f
                    .help
                    .replace('\\', r"\\")
                    .replace('\n', r"\n")
                    .replace('"', "\\\"");
                writeln!(out, "# HELP {family} {help}")?;
            }
            for track in f.tracks.values() {
                write_track(out, name, track)?;
            }
        }
        writeln!(out, "# EOF")
    }
}

fn write_track(out: &mut dyn Write, name: &str, track: &Track) -> io::Result<()> {
    let plain = labels(&track.labels, None);
    for (ms, values) in &track.points {
        let ts = format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000));
        match &track.shape {
            Shape::Single => writeln!(out, "{name}{plain} {} {ts}", float(values[0]))?,
            Shape::Histogram(bounds) => {
                for (b, v) in bounds.iter().zip(values) {
                    let le = labels(&track.labels, Some(("le", &label_float(*b))));
                    writeln!(out, "{name}_bucket{le} {} {ts}", float(*v))?;
                }
                let n = bounds.len();
                let inf = labels(&track.labels, Some(("le", "+Inf")));
                writeln!(out, "{name}_bucket{inf} {} {ts}", float(values[n]))?;
                writeln!(out, "{name}_count{plain} {} {ts}", float(values[n]))?;
                writeln!(out, "{name}_sum{plain} {} {ts}", float(values[n + 1]))?;
            }
            Shape::Summary(quantiles) => {
                for (q, v) in quantiles.iter().zip(values) {
                    let ql = labels(&track.labels, Some(("quantile", &label_float(*q))));
                    writeln!(out, "{name}{ql} {} {ts}", float(*v))?;
                }
                let n = quantiles.len();
                writeln!(out, "{name}_count{plain} {} {ts}", float(values[n]))?;
                writeln!(out, "{name}_sum{plain} {} {ts}", float(values[n + 1]))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGauge, Opts, Registry};

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn snapshots_become_one_openmetrics_text_grouped_by_family_and_metric() {
        let registry = Registry::new();
        let created = crate::metrics::register(
            &registry,
            IntCounterVec::new(Opts::new("x_created_total", "Created."), &["pool"]),
        );
        let nodes = crate::metrics::register(&registry, IntGauge::new("x_nodes", "Nodes \"now\"."));
        let h = crate::metrics::register(
            &registry,
            Histogram::with_opts(HistogramOpts::new("x_seconds", "S.").buckets(vec![0.5, 1.0])),
        );
        let mut series = Series::new();
        created.with_label_values(&["a"]).inc();
        nodes.set(1);
        h.observe(0.7);
        series.add(&registry.gather(), t(1_767_571_200));
        created.with_label_values(&["a"]).inc();
        created.with_label_values(&["b\"q"]).inc();
        nodes.set(3);
        series.add(&registry.gather(), t(1_767_571_260));
        let mut out = Vec::new();
        series.write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(series.snapshots(), 2);
        assert_eq!(
            text,
            "# TYPE x_created counter\n\
             # HELP x_created Created.\n\
             x_created_total{pool=\"a\"} 1.0 1767571200.000\n\
             x_created_total{pool=\"a\"} 2.0 1767571260.000\n\
             x_created_total{pool=\"b\\\"q\"} 1.0 1767571260.000\n\
             # TYPE x_nodes gauge\n\
             # HELP x_nodes Nodes \\\"now\\\".\n\
             x_nodes 1.0 1767571200.000\n\
             x_nodes 3.0 1767571260.000\n\
             # TYPE x_seconds histogram\n\
             # HELP x_seconds S.\n\
             x_seconds_bucket{le=\"0.5\"} 0.0 1767571200.000\n\
             x_seconds_bucket{le=\"1\"} 1.0 1767571200.000\n\
             x_seconds_bucket{le=\"+Inf\"} 1.0 1767571200.000\n\
             x_seconds_count 1.0 1767571200.000\n\
             x_seconds_sum 0.7 1767571200.000\n\
             x_seconds_bucket{le=\"0.5\"} 0.0 1767571260.000\n\
             x_seconds_bucket{le=\"1\"} 1.0 1767571260.000\n\
             x_seconds_bucket{le=\"+Inf\"} 1.0 1767571260.000\n\
             x_seconds_count 1.0 1767571260.000\n\
             x_seconds_sum 0.7 1767571260.000\n\
             # EOF\n"
        );
    }

    #[test]
    fn target_labels_are_added_where_a_metric_lacks_them() {
        let registry = Registry::new();
        let c = crate::metrics::register(
            &registry,
            IntCounterVec::new(Opts::new("x_total", "X."), &["job", "pool"]),
        );
        c.with_label_values(&["mine", "a"]).inc();
        let g = crate::metrics::register(&registry, IntGauge::new("y", "Y."));
        g.set(2);
        let mut families = registry.gather();
        add_labels(
            &mut families,
            &[
                ("job".into(), "karpenter".into()),
                ("cluster".into(), "sim".into()),
            ],
        );
        let text = text(&families);
        assert!(
            text.contains("x_total{cluster=\"sim\",job=\"mine\",pool=\"a\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("y{cluster=\"sim\",job=\"karpenter\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn families_and_metrics_are_sorted() {
        let registry = Registry::new();
        let g = crate::metrics::register(
            &registry,
            IntCounterVec::new(Opts::new("b_total", "B."), &["k"]),
        );
        for k in ["z", "a", "m"] {
            g.with_label_values(&[k]).inc();
        }
        let mut families = registry.gather();
        families.reverse();
        for f in &mut families {
            f.mut_metric().reverse();
        }
        sort(&mut families);
        let text = text(&families);
        let a = text.find("k=\"a\"").unwrap();
        let m = text.find("k=\"m\"").unwrap();
        let z = text.find("k=\"z\"").unwrap();
        assert!(a < m && m < z, "{text}");
    }
}
