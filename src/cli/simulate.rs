//! `dovetail simulate`.

use std::path::Path;

use super::args::{OutputFormat, SimulateArgs};
use super::{Io, exit, render};
use crate::simulate::driver::{ProgressReporter, SimError, Simulation};
use crate::simulate::scenario;

/// The bundled demo: its scenario and the configuration repository it runs
/// against (`examples-repo/`) are compiled in, so an installed or copied
/// binary runs it from any directory.
const DEMO: &str = include_str!("../../tests/scenarios/demo.yaml");
/// Where the demo scenario sits relative to its repository, as in the
/// checkout: its `config` is `../../examples-repo`.
const DEMO_AT: &str = "tests/scenarios";
/// The files of `examples-repo/` (a test checks that none is missing).
const DEMO_CONFIG: [(&str, &str); 6] = [
    (
        "examples-repo/nodeclasses/default.yaml",
        include_str!("../../examples-repo/nodeclasses/default.yaml"),
    ),
    (
        "examples-repo/nodeclasses/gpu.yaml",
        include_str!("../../examples-repo/nodeclasses/gpu.yaml"),
    ),
    (
        "examples-repo/nodepools/arm64.yaml",
        include_str!("../../examples-repo/nodepools/arm64.yaml"),
    ),
    (
        "examples-repo/nodepools/batch.yaml",
        include_str!("../../examples-repo/nodepools/batch.yaml"),
    ),
    (
        "examples-repo/nodepools/general.yaml",
        include_str!("../../examples-repo/nodepools/general.yaml"),
    ),
    (
        "examples-repo/nodepools/gpu.yaml",
        include_str!("../../examples-repo/nodepools/gpu.yaml"),
    ),
];

/// Lays the demo out in a temporary directory, as in the checkout, and
/// parses it.
fn demo() -> Result<(tempfile::TempDir, scenario::Scenario), String> {
    let dir = tempfile::Builder::new()
        .prefix("dovetail-demo-")
        .tempdir()
        .map_err(|e| format!("cannot create a directory for the bundled demo: {e}"))?;
    for (path, text) in DEMO_CONFIG {
        crate::fsutil::write_inside(dir.path(), Path::new(path), text.as_bytes())
            .map_err(|e| format!("cannot lay out the bundled demo: {e}"))?;
    }
    let at = dir.path().join(DEMO_AT);
    std::fs::create_dir_all(&at).map_err(|e| format!("cannot lay out the bundled demo: {e}"))?;
    let s = scenario::parse("(bundled demo)", &at, DEMO.as_bytes())
        .and_then(|s| scenario::check_on_disk(&s).map(|()| s))
        .map_err(|d| d.to_string())?;
    Ok((dir, s))
}

/// Events printed by the text output before it refers to the JSON report.
const TEXT_EVENTS: usize = 200;

/// A run that takes longer than this shows its progress on a terminal.
const PROGRESS_AFTER: std::time::Duration = std::time::Duration::from_secs(2);
/// How often the progress line is redrawn.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

pub fn run(a: &SimulateArgs, io: &mut Io) -> u8 {
    run_with_progress(a, io, PROGRESS_AFTER, PROGRESS_EVERY)
}

/// [`run`], showing progress on stderr (a terminal only) after `after`,
/// then every `every`.
pub(crate) fn run_with_progress(
    a: &SimulateArgs,
    io: &mut Io,
    after: std::time::Duration,
    every: std::time::Duration,
) -> u8 {
    // The bundled demo's files live as long as the run.
    let mut _demo_dir = None;
    let parsed = match &a.scenario {
        Some(path) => scenario::load(path),
        None => match demo() {
            Ok((dir, s)) => {
                _demo_dir = Some(dir);
                Ok(s)
            }
            Err(e) => {
                io.log(&format!("error: {e}"));
                return exit::ERROR;
            }
        },
    };
    let mut scenario = match parsed {
        Ok(s) => s,
        Err(d) => {
            let style = render::Style::for_stream(io.err_is_terminal);
            let _ = io.err.write_all(render::text(&[*d], style).as_bytes());
            return exit::ERROR;
        }
    };
    // The command line wins over the scenario's settings, gate by gate.
    if let Some(p) = a.preference_policy {
        scenario.preferences = p.into();
    }
    scenario.feature_gates =
        match super::feature_gates(a.feature_gates.as_deref(), scenario.feature_gates) {
            Ok(g) => g,
            Err(e) => {
                io.log(&format!("error: {e}"));
                return exit::ERROR;
            }
        };
    let until = match a
        .until
        .as_deref()
        .map(|u| crate::timing::parse_duration(u, crate::timing::DurationSyntax::Hms))
    {
        None => None,
        Some(Ok(crate::timing::NillableDuration::After(d))) if d <= scenario::MAX_DURATION => {
            Some(d)
        }
        Some(Ok(crate::timing::NillableDuration::After(_))) => {
            io.log(&format!(
                "error: --until {} is beyond the simulation's limit of {} (31 days)",
                a.until.as_deref().unwrap_or_default(),
                scenario::human(scenario::MAX_DURATION)
            ));
            return exit::ERROR;
        }
        Some(Err(e)) => {
            io.log(&format!("error: --until: {e}"));
            return exit::ERROR;
        }
        Some(_) => {
            io.log("error: --until takes a duration such as 90m or 24h");
            return exit::ERROR;
        }
    };
    if let Some(d) = zones_mismatch(&scenario, a.catalog.as_deref()) {
        io.diagnostics(&[d]);
        return exit::ERROR;
    }
    let run_for = until.unwrap_or(scenario.until);
    let snapshot_every = match metrics_every(a.metrics_every.as_deref(), run_for) {
        Ok(e) => e,
        Err(e) => {
            io.log(&format!("error: {e}"));
            return exit::ERROR;
        }
    };
    // Refused before the run, which may be long, rather than after.
    for path in a
        .output_file
        .iter()
        .chain(a.metrics.iter())
        .chain(a.snapshot_out.iter())
    {
        if let Err(e) = crate::fsutil::check_target(path) {
            io.error(
                &e,
                Some("give the path of a regular file (or of one to create)"),
            );
            return exit::ERROR;
        }
    }
    if a.serve.is_some() {
        // Served runs keep real time: objects carry today's timestamps, as
        // an external controller on the wall clock expects.
        scenario.start =
            crate::clock::truncate_to_second(crate::clock::Clock::now(&crate::clock::SystemClock));
        if until.is_some() {
            scenario.until = run_for;
        }
    }
    let sim = Simulation::new(scenario, a.catalog.as_deref()).map(|s| match &a.metrics {
        Some(_) => s.with_metrics(snapshot_every, a.metrics_label.clone()),
        None => s,
    });
    // Listed after the run, for --snapshot-out.
    let cluster = sim.as_ref().ok().map(Simulation::cluster);
    let result = if let Some(addr) = &a.serve {
        sim.and_then(|s| super::serve::run(a, addr, s, io))
    } else if io.err_is_terminal {
        // One line on stderr, redrawn in place and cleared at the end.
        let err = &mut *io.err;
        let mut progress = ProgressReporter::new(after, every, |p| {
            let _ = write!(err, "\r\x1b[K{p}");
            let _ = err.flush();
        });
        let result = sim.and_then(|s| s.run_reporting(until, Some(&mut progress)));
        if progress.shown() {
            drop(progress);
            let _ = write!(io.err, "\r\x1b[K");
            let _ = io.err.flush();
        }
        result
    } else {
        sim.and_then(|s| s.run(until))
    };
    let report = match result {
        Ok(r) => r,
        Err(SimError::InvalidConfig { path, diagnostics }) => {
            let style = render::Style::for_stream(io.err_is_terminal);
            let _ = io
                .err
                .write_all(render::text(&diagnostics, style).as_bytes());
            io.log(&format!(
                "error: the configuration repository {path} is invalid"
            ));
            return exit::ERROR;
        }
        Err(SimError::Input(diagnostics)) => {
            let style = render::Style::for_stream(io.err_is_terminal);
            let _ = io
                .err
                .write_all(render::text(&diagnostics, style).as_bytes());
            return exit::ERROR;
        }
        Err(e) => {
            io.error(&e, None);
            return exit::ERROR;
        }
    };
    if let (Some(path), Some(m)) = (&a.metrics, &report.metrics) {
        let written = match &m.series {
            Some(series) => crate::fsutil::write_file_with(path, |w| series.write(w)),
            None => crate::fsutil::write_file(
                path,
                crate::metrics::exposition::text(&m.families).as_bytes(),
            ),
        };
        if let Err(e) = written {
            io.error(&e, Some("check that the --metrics file can be written"));
            return exit::ERROR;
        }
        if let Some(series) = &m.series {
            io.log(&format!(
                "simulate: {} metric snapshots written to {}",
                series.snapshots(),
                path.display()
            ));
        }
    }
    if let (Some(path), Some(cluster)) = (&a.snapshot_out, &cluster) {
        let snapshot = crate::simulate::snapshot::snapshot(cluster);
        let text = super::snapshot::render(&snapshot, super::snapshot::format_of(path));
        if let Err(e) = crate::fsutil::write_file(path, text.as_bytes()) {
            io.error(
                &e,
                Some("check that the --snapshot-out file can be written"),
            );
            return exit::ERROR;
        }
        io.log(&format!(
            "simulate: snapshot of {} objects written to {}",
            snapshot["items"].as_array().map_or(0, Vec::len),
            path.display()
        ));
    }
    let rendered = match a.output {
        OutputFormat::Json => format!("{}\n", report.to_json()),
        OutputFormat::Html => crate::simulate::html::render(&report),
        _ => {
            // Colour only for a terminal, never in a file.
            let terminal = io.out_is_terminal && a.output_file.is_none();
            let color = render::Style::for_stream(terminal).color;
            report.to_text(TEXT_EVENTS, color)
        }
    };
    match &a.output_file {
        Some(path) => {
            if let Err(e) = crate::fsutil::write_file(path, rendered.as_bytes()) {
                io.error(&e, Some("check that the --output-file can be written"));
                return exit::ERROR;
            }
        }
        None => io.data(&rendered),
    }
    exit::OK
}

/// The shortest `--metrics-every`, and the most snapshots a run may take.
const MIN_METRICS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
const MAX_SNAPSHOTS: u64 = 100_000;

/// `--metrics-every` for a run of `run_for`.
fn metrics_every(
    arg: Option<&str>,
    run_for: std::time::Duration,
) -> Result<Option<std::time::Duration>, String> {
    use crate::timing::{DurationSyntax, NillableDuration, parse_duration};
    let Some(arg) = arg else { return Ok(None) };
    let every = match parse_duration(arg, DurationSyntax::Hms) {
        Ok(NillableDuration::After(d)) => d,
        _ => {
            return Err(format!(
                "--metrics-every {arg}: takes a duration such as 30s, 1m or 1h"
            ));
        }
    };
    if every < MIN_METRICS_EVERY {
        return Err(format!(
            "--metrics-every {arg}: the shortest interval is 1s"
        ));
    }
    let snapshots = run_for.as_secs() / every.as_secs().max(1) + 1;
    if snapshots > MAX_SNAPSHOTS {
        return Err(format!(
            "--metrics-every {arg}: {snapshots} snapshots over {}; at most {MAX_SNAPSHOTS} (choose a longer interval)",
            scenario::human(run_for)
        ));
    }
    Ok(Some(every))
}

/// The simulated EC2 offers only the catalog's offerings in the scenario's
/// zones: when none of the catalog's zones is among them, nothing could
/// ever launch, and every pod would only say "no instance type matches".
fn zones_mismatch(
    scenario: &scenario::Scenario,
    catalog: Option<&Path>,
) -> Option<crate::diag::Diagnostic> {
    use crate::world::ec2::SimEc2;
    let types = match catalog.or(scenario.catalog.as_deref()) {
        Some(p) => SimEc2::load_catalog(p),
        None => SimEc2::builtin_catalog(),
    }
    // An unreadable catalog is reported when the simulation loads it.
    .ok()?;
    let zones: std::collections::BTreeSet<&str> = types
        .iter()
        .flat_map(|t| t.offerings.iter().map(|o| o.zone.as_str()))
        .collect();
    if zones.is_empty() || zones.iter().any(|z| scenario.zones.iter().any(|s| s == z)) {
        return None;
    }
    Some(
        crate::diag::Diagnostic::error(
            "scenario",
            format!(
                "none of the catalog's zones ({}) is among the simulation's zones ({}): no instance type could launch",
                zones.into_iter().collect::<Vec<_>>().join(", "),
                scenario.zones.join(", ")
            ),
        )
        .in_file(&scenario.file)
        .at(scenario.zones_pos)
        .with_hint("set `zones` (or `region`) to the catalog's, or give a catalog of this region"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The compiled-in demo repository is `examples-repo/`, file for file.
    #[test]
    fn the_embedded_demo_is_the_examples_repository() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut on_disk = Vec::new();
        for sub in ["nodeclasses", "nodepools"] {
            for e in std::fs::read_dir(root.join("examples-repo").join(sub)).unwrap() {
                let e = e.unwrap();
                on_disk.push(format!(
                    "examples-repo/{sub}/{}",
                    e.file_name().to_string_lossy()
                ));
            }
        }
        on_disk.sort();
        let embedded: Vec<String> = DEMO_CONFIG.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(embedded, on_disk, "embed every file of examples-repo/");
        for (path, text) in DEMO_CONFIG {
            assert_eq!(std::fs::read_to_string(root.join(path)).unwrap(), text);
        }
        let (dir, s) = demo().unwrap();
        assert!(s.config.starts_with(dir.path()), "{}", s.config.display());
        assert!(s.config.join("nodepools/general.yaml").is_file());
    }

    /// `simulate ARGS` in-process with both streams taken for terminals or
    /// not, progress shown from the first pass.
    fn run_on(scenario: &Path, terminal: bool) -> (u8, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = {
            let mut io = Io {
                out: &mut out,
                err: &mut err,
                out_is_terminal: terminal,
                err_is_terminal: terminal,
            };
            let args = SimulateArgs {
                scenario: Some(scenario.to_path_buf()),
                until: None,
                catalog: None,
                output: OutputFormat::Text,
                output_file: None,
                metrics: None,
                metrics_every: None,
                metrics_label: Vec::new(),
                snapshot_out: None,
                feature_gates: None,
                preference_policy: None,
                serve: None,
                kubeconfig_out: None,
                audit_log: None,
                speed: 1.0,
                controller: "in-process".into(),
                ec2_endpoint: None,
                cluster_name: "dovetail".into(),
                region: None,
                fault: Vec::new(),
                watch_log: None,
            };
            run_with_progress(
                &args,
                &mut io,
                std::time::Duration::ZERO,
                std::time::Duration::ZERO,
            )
        };
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    /// On a terminal, a long run says on stderr how far it has got (the
    /// simulated time, pods and nodes), redrawn on one line and cleared at
    /// the end, and the report has colour (unless NO_COLOR); on a pipe,
    /// neither.
    #[test]
    fn progress_and_colour_only_on_a_terminal() {
        let dir = tempfile::tempdir().unwrap();
        let scenario = dir.path().join("s.yaml");
        std::fs::write(
            &scenario,
            format!(
                "config: {}\ntimeline:\n  - at: 0s\n    apply:\n      - {{apiVersion: apps/v1, kind: Deployment, metadata: {{name: web}}, spec: {{replicas: 3, selector: {{matchLabels: {{app: web}}}}, template: {{metadata: {{labels: {{app: web}}}}, spec: {{containers: [{{name: web, image: w, resources: {{requests: {{cpu: '1', memory: 1Gi}}}}}}]}}}}}}}}\nuntil: 10m\n",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("examples-repo").display()
            ),
        )
        .unwrap();
        let (code, out, err) = run_on(&scenario, false);
        assert_eq!(code, exit::OK, "{err}");
        assert_eq!(err, "");
        assert!(!out.contains('\x1b'), "{out}");

        let (code, out, err) = run_on(&scenario, true);
        assert_eq!(code, exit::OK, "{err}");
        let updates: Vec<&str> = err.split("\r\x1b[K").filter(|s| !s.is_empty()).collect();
        assert!(err.ends_with("\r\x1b[K"), "the line is cleared: {err:?}");
        assert!(updates.len() > 1, "{err:?}");
        assert!(
            updates[0].starts_with("simulate: 0h00m00s of 0h10m00s simulated, "),
            "{err:?}"
        );
        assert_eq!(
            *updates.last().unwrap(),
            "simulate: 0h10m00s of 0h10m00s simulated, 3 pods (0 pending), 1 nodes",
            "{err:?}"
        );
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        assert_eq!(
            out.starts_with("\x1b[1mTimeline (from "),
            !no_color,
            "{out}"
        );
        assert_eq!(out.contains("\x1b[36mApplied\x1b[0m"), !no_color, "{out}");
    }
}
