//! The simulation's report as one self-contained HTML page
//! (`simulate --output html`): the summary, cost and utilization per
//! NodePool, charts on one shared time axis (nodes per NodePool, the
//! fleet's price against the lower bound, pending pods, disruptions by
//! reason as marks) with values on hover, the disruption decisions as a
//! table linked to their marks, and the pods still pending with their
//! reasons.
//!
//! The charts are inline SVG drawn here; a few lines of inline script add
//! the hover read-out and the links between marks and rows. A Content
//! Security Policy forbids loading anything, so the page is the same
//! offline, and its size depends on the run's length (at most
//! [`super::report::SERIES_POINTS`] points per series) and decisions, not
//! on the number of pods: pending pods are grouped by workload and reason.

use std::fmt::Write as _;

use super::report::{DecisionRecord, Report, offset};
use crate::diag::thousands;

/// Decisions listed (and marked) at most; the JSON report has them all.
/// With [`MAX_PENDING_GROUPS`] and `MAX_NAMES`, this keeps the page
/// under 5 MB whatever the run (a test renders the worst case).
pub const MAX_DECISIONS: usize = 2_000;
/// Groups of pending pods listed at most.
pub const MAX_PENDING_GROUPS: usize = 1_000;
/// NodeClaims named per decision, and pods per group of pending pods.
const MAX_NAMES: usize = 8;

/// Horizontal geometry of every chart (viewBox units): the plot spans
/// `LEFT..LEFT + WIDTH`, the same time axis in each.
const VIEW_WIDTH: f64 = 1000.0;
const LEFT: f64 = 72.0;
const WIDTH: f64 = 904.0;
const TOP: f64 = 12.0;
const AXIS: f64 = 22.0;

const PALETTE: [&str; 10] = [
    "#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d",
    "#ea580c", "#4b5563",
];

fn reason_color(reason: &str) -> &'static str {
    match reason {
        "Empty" => "#6b7280",
        "Underutilized" => "#2563eb",
        "Drifted" => "#d97706",
        "Expired" => "#7c3aed",
        "Interrupted" => "#dc2626",
        _ => "#059669",
    }
}

/// Text for HTML content and attribute values.
use crate::diag::escape_markup as esc;

fn money(x: f64) -> String {
    format!("${x:.4}")
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// `1h30m`-style offset without the sign.
fn at(t: f64) -> String {
    offset(t).trim_start_matches('+').to_string()
}

/// The y scale for values up to `max`: the top and the spacing of its
/// ticks (1, 2, 2.5 or 5 × 10^k; whole numbers for counts), about four.
fn y_scale(max: f64, whole: bool) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / 4.0;
    let p = 10f64.powf(raw.log10().floor());
    let mut step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|v| *v >= raw)
        .unwrap_or(10.0 * p);
    if whole {
        step = step.ceil().max(1.0);
    }
    ((max / step).ceil() * step, step)
}

/// A time-axis label: hours and minutes since the start (`2:30`).
fn clock(t: f64) -> String {
    let m = (t / 60.0).round() as u64;
    format!("{}:{:02}", m / 60, m % 60)
}

/// A tick spacing for a time axis of `duration` seconds: at most about
/// twelve ticks.
fn time_tick(duration: f64) -> f64 {
    [
        60.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 10800.0, 21600.0, 43200.0, 86400.0,
        172800.0, 604800.0,
    ]
    .into_iter()
    .find(|s| duration / s <= 12.0)
    .unwrap_or(604800.0)
}

/// The x of time `t` on every chart.
struct Axis {
    duration: f64,
}

impl Axis {
    fn x(&self, t: f64) -> f64 {
        if self.duration <= 0.0 {
            return LEFT;
        }
        LEFT + (t / self.duration).clamp(0.0, 1.0) * WIDTH
    }
}

/// One chart of values over time: `series` are (name, colour, dashed,
/// values on the report's time points; None leaves a gap).
struct Chart<'a> {
    id: &'a str,
    title: &'a str,
    height: f64,
    unit: fn(f64) -> String,
    /// Counts: whole-number ticks.
    whole: bool,
    series: Vec<(String, &'a str, bool, Vec<Option<f64>>)>,
}

fn svg_open(out: &mut String, id: &str, height: f64, label: &str) {
    let _ = write!(
        out,
        "<svg id=\"{id}\" class=\"chart\" viewBox=\"0 0 {VIEW_WIDTH} {height}\" role=\"img\" aria-label=\"{}\" data-height=\"{height}\">",
        esc(label)
    );
}

/// The time axis at the bottom of a chart of `height`, and the hover
/// cursor and the area that catches the pointer.
fn time_axis(out: &mut String, axis: &Axis, height: f64) {
    let base = height - AXIS;
    let _ = write!(
        out,
        "<g class=\"axis\"><line x1=\"{LEFT}\" y1=\"{base}\" x2=\"{:.1}\" y2=\"{base}\"/>",
        LEFT + WIDTH
    );
    let step = time_tick(axis.duration);
    let mut t = 0.0;
    while t <= axis.duration + 1e-9 {
        let x = axis.x(t);
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{base}\" x2=\"{x:.1}\" y2=\"{:.1}\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            base + 4.0,
            base + 16.0,
            clock(t)
        );
        t += step;
    }
    let _ = write!(
        out,
        "</g><line class=\"cursor\" x1=\"0\" y1=\"{TOP}\" x2=\"0\" y2=\"{base}\"/><rect class=\"hit\" x=\"{LEFT}\" y=\"0\" width=\"{WIDTH}\" height=\"{base}\"/>"
    );
}

impl Chart<'_> {
    fn render(&self, out: &mut String, axis: &Axis, times: &[f64]) {
        let _ = write!(
            out,
            "<figure class=\"panel\"><figcaption>{}",
            esc(self.title)
        );
        out.push_str("<span class=\"legend\">");
        for (name, colour, dashed, _) in &self.series {
            let _ = write!(
                out,
                "<span class=\"key\"><i style=\"border-color:{colour}\"{}></i>{}</span>",
                if *dashed { " class=\"dashed\"" } else { "" },
                esc(name)
            );
        }
        out.push_str("</span></figcaption>");
        svg_open(out, self.id, self.height, self.title);
        let base = self.height - AXIS;
        let plot = base - TOP;
        let max = self
            .series
            .iter()
            .flat_map(|(_, _, _, v)| v.iter().flatten())
            .fold(0.0f64, |m, v| m.max(*v));
        let (top, step) = y_scale(max, self.whole);
        let y = |v: f64| base - (v / top).clamp(0.0, 1.0) * plot;
        out.push_str("<g class=\"grid\">");
        let ticks = (top / step).round() as u32;
        for i in 0..=ticks {
            let v = step * f64::from(i);
            let _ = write!(
                out,
                "<line x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                y(v),
                LEFT + WIDTH,
                y(v),
                LEFT - 6.0,
                y(v) + 4.0,
                (self.unit)(v)
            );
        }
        out.push_str("</g>");
        for (name, colour, dashed, values) in &self.series {
            // Each value holds over the interval that ends at its time: a
            // step to it at the interval's start.
            let mut d = String::new();
            let mut pen = false;
            for (i, v) in values.iter().enumerate() {
                let Some(v) = v else {
                    pen = false;
                    continue;
                };
                let x_end = axis.x(times[i]);
                let x_start = axis.x(if i == 0 { 0.0 } else { times[i - 1] });
                if pen {
                    let _ = write!(d, "V{:.1}H{x_end:.1}", y(*v));
                } else {
                    let _ = write!(d, "M{x_start:.1} {:.1}H{x_end:.1}", y(*v));
                    pen = true;
                }
            }
            let _ = write!(
                out,
                "<path class=\"series{}\" data-series=\"{}\" d=\"{d}\" style=\"stroke:{colour}\"/>",
                if *dashed { " dashed" } else { "" },
                esc(name)
            );
        }
        time_axis(out, axis, self.height);
        out.push_str("</svg></figure>");
    }
}

/// The disruption decisions as marks, one lane per reason.
fn disruption_marks(out: &mut String, axis: &Axis, decisions: &[DecisionRecord]) {
    let mut reasons: Vec<&str> = decisions.iter().map(|d| d.reason.as_str()).collect();
    reasons.sort_unstable();
    reasons.dedup();
    let lane = 22.0;
    let height = TOP + lane * reasons.len().max(1) as f64 + AXIS + 4.0;
    out.push_str("<figure class=\"panel\"><figcaption>Disruption decisions by reason <span class=\"legend\">");
    for r in &reasons {
        let _ = write!(
            out,
            "<span class=\"key\"><b style=\"background:{}\"></b>{}</span>",
            reason_color(r),
            esc(r)
        );
    }
    out.push_str("</span></figcaption>");
    svg_open(
        out,
        "chart-disruptions",
        height,
        "Disruption decisions by reason",
    );
    for (i, r) in reasons.iter().enumerate() {
        let y = TOP + lane * (i as f64 + 0.5);
        let _ = write!(
            out,
            "<g class=\"lane\" data-reason=\"{}\"><line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text></g>",
            esc(r),
            LEFT + WIDTH,
            LEFT - 6.0,
            y + 4.0,
            esc(r)
        );
    }
    for (i, d) in decisions.iter().enumerate() {
        let lane_of = reasons.iter().position(|r| *r == d.reason).unwrap_or(0);
        let y = TOP + lane * (lane_of as f64 + 0.5);
        let _ = write!(
            out,
            "<a href=\"#d-{i}\"><circle id=\"m-{i}\" class=\"mark\" data-row=\"{i}\" data-reason=\"{}\" cx=\"{:.1}\" cy=\"{y:.1}\" r=\"5\" style=\"fill:{}\"><title>{} {}: {} {} node(s), {}/h saved</title></circle></a>",
            esc(&d.reason),
            axis.x(d.t),
            reason_color(&d.reason),
            at(d.t),
            esc(&d.reason),
            esc(&d.decision),
            d.nodeclaims.len(),
            money(d.savings_per_hour),
        );
    }
    let h = height - 4.0;
    time_axis(out, axis, h);
    out.push_str("</svg></figure>");
}

fn names(list: &[String]) -> String {
    let mut s = list
        .iter()
        .take(MAX_NAMES)
        .map(|n| esc(n))
        .collect::<Vec<_>>()
        .join(", ");
    if list.len() > MAX_NAMES {
        let _ = write!(s, " and {} more", thousands(list.len() - MAX_NAMES));
    }
    s
}

const STYLE: &str = r#"
:root{--fg:#111827;--muted:#6b7280;--line:#e5e7eb;--bg:#fff;--soft:#f9fafb}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1200px;margin:0 auto;padding:20px 24px 60px}
h1{font-size:22px;margin:0 0 2px}h2{font-size:17px;margin:28px 0 10px}
.sub{color:var(--muted);margin:0 0 16px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:10px}
.card{border:1px solid var(--line);border-radius:8px;padding:10px 12px;background:var(--soft)}
.card .k{color:var(--muted);font-size:12px}.card .v{font-size:19px;font-weight:600}
.card .n{color:var(--muted);font-size:12px}.bad .v{color:#b91c1c}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:12px;color:var(--muted);font-weight:600}
td.num,th.num{text-align:right}
.bar{display:inline-block;height:8px;background:#93c5fd;border-radius:2px;vertical-align:middle;margin-right:6px}
.panel{margin:0 0 6px;padding:0}
figcaption{font-weight:600;font-size:13px;margin:6px 0 0}
.legend{font-weight:400;margin-left:12px}
.key{margin-right:12px;color:var(--muted);white-space:nowrap}
.key i{display:inline-block;width:16px;border-top:2px solid;margin-right:4px;vertical-align:middle}
.key i.dashed{border-top-style:dashed}
.key b{display:inline-block;width:9px;height:9px;border-radius:50%;margin-right:4px}
svg.chart{width:100%;height:auto;display:block;overflow:visible}
svg text{font-size:11px;fill:var(--muted)}
.axis line,.grid line{stroke:var(--line);stroke-width:1}
.lane line{stroke:var(--line);stroke-dasharray:2 3}
path.series{fill:none;stroke-width:1.8}
path.series.dashed{stroke-dasharray:6 4}
.cursor{stroke:#9ca3af;stroke-width:1;visibility:hidden}
.hovering .cursor{visibility:visible}
.hit{fill:transparent}
circle.mark{stroke:#fff;stroke-width:1.5;cursor:pointer}
circle.mark.hl,circle.mark:target{stroke:#111827;stroke-width:3}
tr.hl td,tr:target td{background:#fef3c7}
#readout{position:sticky;top:0;z-index:2;background:rgba(255,255,255,.95);border:1px solid var(--line);border-radius:6px;padding:6px 10px;min-height:32px;font-variant-numeric:tabular-nums}
#readout .t{font-weight:600;margin-right:10px}
.note{color:var(--muted);font-size:12px}
footer{margin-top:40px;color:var(--muted);font-size:12px}
"#;

/// Hover read-out across the charts, and the links between marks and rows.
const SCRIPT: &str = r#"
(function(){
  var start = performance.now();
  document.addEventListener('securitypolicyviolation', function(e){
    var b = document.body; b.dataset.cspViolations = (b.dataset.cspViolations || '') + e.violatedDirective + ' ' + e.blockedURI + ';';
  });
  var data = JSON.parse(document.getElementById('series-data').textContent);
  var L = 72, W = 904;
  var out = document.getElementById('readout');
  var charts = document.querySelectorAll('svg.chart');
  function money(x){ return x == null ? '–' : '$' + x.toFixed(4) + '/h'; }
  function at(t){ var s = Math.round(t), h = Math.floor(s/3600), m = Math.floor(s%3600/60), ss = s%60;
    return h + 'h' + String(m).padStart(2,'0') + 'm' + String(ss).padStart(2,'0') + 's'; }
  function index(t){ var lo = 0, hi = data.t.length - 1;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (data.t[mid] < t) lo = mid + 1; else hi = mid; } return lo; }
  function show(t){
    var i = index(t), x = L + (data.duration > 0 ? data.t[i] / data.duration : 0) * W;
    charts.forEach(function(svg){ var c = svg.querySelector('.cursor'); if (c) { c.setAttribute('x1', x); c.setAttribute('x2', x); } svg.classList.add('hovering'); });
    var parts = [];
    Object.keys(data.nodes).forEach(function(p){ parts.push(p + ' ' + data.nodes[p][i]); });
    out.textContent = '';
    var head = document.createElement('span'); head.className = 't';
    head.textContent = at(data.t[i] ) + (i > 0 ? ' (peak since ' + at(data.t[i-1]) + ')' : '');
    out.appendChild(head);
    out.appendChild(document.createTextNode('nodes: ' + (parts.join(', ') || '0') + ' · price ' + money(data.price[i]) +
      ' · lower bound ' + money(data.bound[i]) + ' · pending pods ' + data.pending[i]));
  }
  charts.forEach(function(svg){
    svg.addEventListener('mousemove', function(e){
      var p = svg.createSVGPoint(); p.x = e.clientX; p.y = e.clientY;
      var m = svg.getScreenCTM(); if (!m) return;
      var q = p.matrixTransform(m.inverse());
      if (q.x < L || q.x > L + W) return;
      show((q.x - L) / W * data.duration);
    });
    svg.addEventListener('mouseleave', function(){ charts.forEach(function(s){ s.classList.remove('hovering'); }); });
  });
  function pair(row, mark){
    if (!row || !mark) return;
    [row, mark].forEach(function(el){
      el.addEventListener('mouseenter', function(){ row.classList.add('hl'); mark.classList.add('hl'); });
      el.addEventListener('mouseleave', function(){ row.classList.remove('hl'); mark.classList.remove('hl'); });
    });
  }
  document.querySelectorAll('circle.mark').forEach(function(m){ pair(document.getElementById('d-' + m.dataset.row), m); });
  document.body.dataset.renderMs = (performance.now() - start).toFixed(1);
  document.body.dataset.ready = '1';
})();
"#;

/// Two runs over the same window (a forecast's sides) on one page: their
/// fleets' price and node count and their pending pods, overlaid (A solid,
/// B dashed). Static: no script.
pub fn render_comparison(a: &Report, a_label: &str, b: &Report, b_label: &str) -> String {
    let axis = Axis {
        duration: a.summary.duration_seconds.max(b.summary.duration_seconds),
    };
    // The sides share the window, so their series share the time points;
    // the shorter is the common part.
    let len = a.series.t.len().min(b.series.t.len());
    let times = &a.series.t[..len];
    let total = |r: &Report| -> Vec<Option<f64>> {
        (0..len)
            .map(|i| Some(r.series.nodes.values().map(|v| v[i] as f64).sum::<f64>()))
            .collect()
    };
    let price = |r: &Report| -> Vec<Option<f64>> {
        r.series.price_per_hour[..len]
            .iter()
            .map(|x| Some(*x))
            .collect()
    };
    let bound =
        |r: &Report| -> Vec<Option<f64>> { r.series.lower_bound_price_per_hour[..len].to_vec() };
    let pending = |r: &Report| -> Vec<Option<f64>> {
        r.series.pending_pods[..len]
            .iter()
            .map(|x| Some(*x as f64))
            .collect()
    };
    let (la, lb) = (format!("A: {a_label}"), format!("B: {b_label}"));
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>dovetail forecast: {} against {}</title><style>{STYLE}</style></head><body><main>\
         <h1>dovetail forecast</h1><p class=\"sub\">{} to {} ({} simulated per side): {} (solid) against {} (dashed)</p>\
         <section id=\"charts\">",
        esc(&la),
        esc(&lb),
        esc(&a.start),
        esc(&a.end),
        at(axis.duration),
        esc(&la),
        esc(&lb)
    );
    let charts = [
        Chart {
            id: "chart-price",
            title: "Price per hour, and the lower bound",
            height: 220.0,
            unit: |v| format!("${v:.2}"),
            whole: false,
            series: vec![
                (format!("{la} $/h"), PALETTE[0], false, price(a)),
                (format!("{lb} $/h"), PALETTE[1], true, price(b)),
                (format!("{la} lower bound"), PALETTE[2], false, bound(a)),
                (format!("{lb} lower bound"), PALETTE[3], true, bound(b)),
            ],
        },
        Chart {
            id: "chart-nodes",
            title: "Nodes",
            height: 200.0,
            unit: |v| format!("{v:.0}"),
            whole: true,
            series: vec![
                (la.clone(), PALETTE[0], false, total(a)),
                (lb.clone(), PALETTE[1], true, total(b)),
            ],
        },
        Chart {
            id: "chart-pending",
            title: "Pending pods",
            height: 160.0,
            unit: |v| format!("{v:.0}"),
            whole: true,
            series: vec![
                (la.clone(), PALETTE[0], false, pending(a)),
                (lb.clone(), PALETTE[1], true, pending(b)),
            ],
        },
    ];
    for c in &charts {
        c.render(&mut out, &axis, times);
    }
    out.push_str("</section><footer>Each side's whole report: a.html and b.html beside this page.</footer></main></body></html>\n");
    out
}

/// The report as an HTML page.
pub fn render(r: &Report) -> String {
    let s = &r.summary;
    let series = &r.series;
    let axis = Axis {
        duration: s.duration_seconds,
    };
    let mut out = String::with_capacity(256 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>dovetail simulate: {} to {}</title><style>{STYLE}</style></head><body><main>",
        esc(&r.start),
        esc(&r.end)
    );
    let _ = write!(
        out,
        "<h1>dovetail simulate</h1><p class=\"sub\">{} to {} ({} simulated)</p>",
        esc(&r.start),
        esc(&r.end),
        at(s.duration_seconds)
    );

    // Summary.
    out.push_str("<section id=\"summary\"><h2>Summary</h2><div class=\"cards\">");
    let card = |out: &mut String, key: &str, value: String, note: String, bad: bool| {
        let _ = write!(
            out,
            "<div class=\"card{}\"><div class=\"k\">{key}</div><div class=\"v\">{value}</div><div class=\"n\">{note}</div></div>",
            if bad { " bad" } else { "" }
        );
    };
    card(
        &mut out,
        "Cost of the run",
        format!("${:.2}", s.cost_usd),
        format!("over {}", at(s.duration_seconds)),
        false,
    );
    let nodes_now = r.nodes.iter().filter(|n| n.deleted_at.is_none()).count();
    card(
        &mut out,
        "Final fleet",
        format!("{}/h", money(s.price_per_hour)),
        format!("{} nodes", thousands(nodes_now)),
        false,
    );
    match s.lower_bound_price_per_hour {
        Some(lb) if lb > 0.0 => card(
            &mut out,
            "Lower bound",
            format!("{}/h", money(lb)),
            format!("fleet is {:.2}× the bound", s.price_per_hour / lb),
            false,
        ),
        _ => card(
            &mut out,
            "Lower bound",
            "–".into(),
            "no workload to bound".into(),
            false,
        ),
    }
    card(
        &mut out,
        "Nodes",
        thousands(s.nodes_launched),
        format!("launched; {} terminated", thousands(s.nodes_terminated)),
        false,
    );
    card(
        &mut out,
        "Pods",
        thousands(s.pods_created),
        format!("created; {} evictions", thousands(s.evictions)),
        false,
    );
    card(
        &mut out,
        "Pending at the end",
        thousands(s.pods_pending),
        if s.pods_pending > 0 {
            "listed below with their reasons".into()
        } else {
            "every pod placed".into()
        },
        s.pods_pending > 0,
    );
    card(
        &mut out,
        "Time pending",
        format!("{:.0} s", s.p99_pending_seconds),
        format!(
            "p99; p50 {:.0} s, max {:.0} s",
            s.p50_pending_seconds, s.max_pending_seconds
        ),
        false,
    );
    let by_reason = s
        .disruptions_by_reason
        .iter()
        .map(|(k, v)| format!("{} {}", esc(k), thousands(*v)))
        .collect::<Vec<_>>()
        .join(", ");
    card(
        &mut out,
        "Nodes disrupted",
        thousands(s.disruptions_by_reason.values().sum()),
        if by_reason.is_empty() {
            "none".into()
        } else {
            by_reason
        },
        false,
    );
    out.push_str("</div>");
    if s.lower_bound_price_per_hour.is_some_and(|lb| lb > 0.0) {
        let g = &s.gap;
        let _ = write!(
            out,
            "<p class=\"note\">What the bound leaves out: idle allocatable {} of cpu, {} of memory (nodes come in whole instance types); DaemonSet pods {} of cpu, {} of memory (once per node)",
            pct(g.idle_cpu_share),
            pct(g.idle_memory_share),
            pct(g.daemonset_cpu_share),
            pct(g.daemonset_memory_share)
        );
        for z in &g.zone_spread {
            let _ = write!(
                out,
                "; {} spread over {} zones (a node in each)",
                esc(&z.workload),
                z.zones
            );
        }
        out.push_str(".</p>");
    }
    out.push_str("</section>");

    // Per NodePool.
    out.push_str(
        "<section id=\"nodepools\"><h2>Cost and utilization per NodePool</h2><table><thead><tr>\
         <th>NodePool</th><th class=\"num\">nodes at the end</th><th class=\"num\">launched</th>\
         <th class=\"num\">cost</th><th class=\"num\">final $/h</th><th>cpu requested</th><th>memory requested</th>\
         </tr></thead><tbody>",
    );
    for p in &s.nodepools {
        let bar = |x: f64| {
            format!(
                "<span class=\"bar\" style=\"width:{:.0}px\"></span>{}",
                (x.clamp(0.0, 1.0) * 120.0).round(),
                pct(x)
            )
        };
        let _ = write!(
            out,
            "<tr data-nodepool=\"{}\"><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">${:.2}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.nodepool),
            esc(&p.nodepool),
            thousands(p.nodes),
            thousands(p.nodes_launched),
            p.cost_usd,
            money(p.price_per_hour),
            bar(p.cpu_utilization),
            bar(p.memory_utilization)
        );
    }
    out.push_str("</tbody></table><p class=\"note\">Utilization: requests of the pods on the NodePool's nodes at the end, DaemonSet pods included, over their allocatable.</p></section>");

    // Charts.
    out.push_str("<section id=\"charts\"><h2>Over time</h2><div id=\"readout\">Point at a chart for the values at that time.</div>");
    let some = |v: &[usize]| v.iter().map(|x| Some(*x as f64)).collect::<Vec<_>>();
    let pools: Vec<(String, &str, bool, Vec<Option<f64>>)> = series
        .nodes
        .iter()
        .enumerate()
        .map(|(i, (pool, v))| (pool.clone(), PALETTE[i % PALETTE.len()], false, some(v)))
        .collect();
    let count = |v: f64| format!("{v:.0}");
    let dollars = |v: f64| format!("${v:.2}");
    let charts = [
        Chart {
            id: "chart-nodes",
            title: "Nodes per NodePool",
            height: 200.0,
            unit: count,
            whole: true,
            series: pools,
        },
        Chart {
            id: "chart-price",
            title: "Price per hour against the lower bound",
            height: 200.0,
            unit: dollars,
            whole: false,
            series: vec![
                (
                    "fleet $/h".into(),
                    PALETTE[0],
                    false,
                    series.price_per_hour.iter().map(|x| Some(*x)).collect(),
                ),
                (
                    "lower bound $/h".into(),
                    PALETTE[2],
                    true,
                    series.lower_bound_price_per_hour.clone(),
                ),
            ],
        },
        Chart {
            id: "chart-pending",
            title: "Pending pods",
            height: 160.0,
            unit: count,
            whole: true,
            series: vec![(
                "pending pods".into(),
                PALETTE[3],
                false,
                some(&series.pending_pods),
            )],
        },
    ];
    for c in &charts {
        c.render(&mut out, &axis, &series.t);
    }
    let shown = &r.disruptions[..r.disruptions.len().min(MAX_DECISIONS)];
    disruption_marks(&mut out, &axis, shown);
    out.push_str(
        "<p class=\"note\">Each point is the largest value in the interval that ends at it (",
    );
    let _ = write!(
        out,
        "{} s); the lower bound is sampled every 15 minutes.</p></section>",
        series.step_seconds
    );

    // Decisions.
    let _ = write!(
        out,
        "<section id=\"disruptions\"><h2>Disruption decisions ({})</h2>",
        thousands(r.disruptions.len())
    );
    if r.disruptions.is_empty() {
        out.push_str("<p class=\"note\">None.</p>");
    }
    out.push_str(
        "<table><thead><tr><th>time</th><th>reason</th><th>decision</th><th>consolidation</th>\
         <th>NodeClaims</th><th>replacements (cheapest type)</th><th class=\"num\">saves</th></tr></thead><tbody>",
    );
    for (i, d) in shown.iter().enumerate() {
        let replacements = d
            .replacements
            .iter()
            .zip(d.replacement_types.iter().map(|t| t.first()))
            .map(|(r, t)| match t {
                Some(t) => format!("{r} ({t})"),
                None => r.clone(),
            })
            .collect::<Vec<_>>();
        let _ = write!(
            out,
            "<tr id=\"d-{i}\" data-reason=\"{}\"><td><a href=\"#m-{i}\">{}</a></td><td><b style=\"color:{}\">{}</b></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}/h</td></tr>",
            esc(&d.reason),
            at(d.t),
            reason_color(&d.reason),
            esc(&d.reason),
            esc(&d.decision),
            esc(&d.consolidation_type),
            names(&d.nodeclaims),
            names(&replacements),
            money(d.savings_per_hour)
        );
    }
    out.push_str("</tbody></table>");
    if r.disruptions.len() > shown.len() {
        let _ = write!(
            out,
            "<p class=\"note\">The first {} decisions are shown; the {} others are in <code>--output json</code>.</p>",
            thousands(shown.len()),
            thousands(r.disruptions.len() - shown.len())
        );
    }
    out.push_str("</section>");

    // Pending pods.
    let _ = write!(
        out,
        "<section id=\"pending\"><h2>Pods still pending at the end ({})</h2>",
        thousands(r.unschedulable.len())
    );
    if r.unschedulable.is_empty() {
        out.push_str("<p class=\"note\">None: every pod was placed.</p>");
    } else {
        let workloads = r.workloads();
        let groups = r.pending_groups(&workloads);
        out.push_str("<table><thead><tr><th>workload or pod</th><th class=\"num\">pods</th><th>reason</th></tr></thead><tbody>");
        for (workload, reason, pods) in groups.iter().take(MAX_PENDING_GROUPS) {
            let who = match workload {
                Some(w) => format!(
                    "{}<div class=\"note\">{}</div>",
                    esc(w),
                    names(&pods.iter().map(|p| p.to_string()).collect::<Vec<_>>())
                ),
                None => names(&pods.iter().map(|p| p.to_string()).collect::<Vec<_>>()),
            };
            let _ = write!(
                out,
                "<tr><td>{who}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                thousands(pods.len()),
                esc(reason)
            );
        }
        out.push_str("</tbody></table>");
        if groups.len() > MAX_PENDING_GROUPS {
            let _ = write!(
                out,
                "<p class=\"note\">{} more groups are in <code>--output json</code>.</p>",
                thousands(groups.len() - MAX_PENDING_GROUPS)
            );
        }
    }
    out.push_str("</section><footer>Written by <code>dovetail simulate --output html</code>; the same run's <code>--output json</code> has every node, pod, event and decision.</footer></main>");

    // The series for the read-out; `<` escaped so the text cannot close
    // the element.
    let data = serde_json::json!({
        "duration": s.duration_seconds,
        "t": series.t,
        "nodes": series.nodes,
        "price": series.price_per_hour,
        "bound": series.lower_bound_price_per_hour,
        "pending": series.pending_pods,
    });
    let _ = writeln!(
        out,
        "<script type=\"application/json\" id=\"series-data\">{}</script><script>{SCRIPT}</script></body></html>",
        data.to_string().replace('<', "\\u003c")
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_scales_are_nice() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&apos;"
        );
        assert_eq!(y_scale(0.0, true), (1.0, 1.0));
        assert_eq!(y_scale(5.0, true), (6.0, 2.0));
        assert_eq!(y_scale(20.0, true), (20.0, 5.0));
        assert_eq!(y_scale(0.93, false), (1.0, 0.25));
        assert_eq!(y_scale(f64::NAN, false), (1.0, 0.25));
        assert_eq!(y_scale(2000.0, true), (2000.0, 500.0));
        assert_eq!(
            (clock(0.0), clock(5400.0), clock(90000.0)),
            ("0:00".into(), "1:30".into(), "25:00".into())
        );
        assert_eq!(time_tick(3.0 * 3600.0), 900.0);
        assert_eq!(time_tick(24.0 * 3600.0), 7200.0);
        let a = Axis { duration: 100.0 };
        assert_eq!(
            (a.x(0.0), a.x(100.0), a.x(200.0)),
            (LEFT, LEFT + WIDTH, LEFT + WIDTH)
        );
    }

    #[test]
    fn a_series_is_a_step_line_with_gaps_where_there_is_no_value() {
        let mut out = String::new();
        let chart = Chart {
            id: "c",
            title: "T",
            height: 100.0,
            unit: |v| format!("{v}"),
            whole: false,
            series: vec![(
                "s".into(),
                "#000",
                true,
                vec![Some(0.0), Some(2.0), None, Some(1.0)],
            )],
        };
        chart.render(&mut out, &Axis { duration: 30.0 }, &[0.0, 10.0, 20.0, 30.0]);
        // 0 at the start, 2 over (0, 10], nothing over (10, 20], 1 over (20, 30].
        assert!(
            out.contains("d=\"M72.0 78.0H72.0V12.0H373.3M674.7 45.0H976.0\""),
            "{out}"
        );
        assert!(out.contains("class=\"series dashed\" data-series=\"s\""));
        assert_eq!(out.matches("<path").count(), 1);
    }
}
