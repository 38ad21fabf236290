//! `dovetail plan`: one solve outside any cluster.

use std::time::Instant;

use super::args::{OutputFormat, PlanArgs};
use super::validate::{display_prefix, load_repo};
use super::{CATALOG_HINT, Io, exit, render};
use crate::clock::{Clock, SystemClock};
use crate::config::validate::{self, Options};
use crate::convert::{ConfigDocs, KeptExisting, build_input_from, nodepool_specs_with_overlays};
use crate::diag::Severity;
use crate::model::catalog::read_catalog;
use crate::plan::read_pods;
use crate::scheduling::{SolveOptions, solve};
use crate::snapshot::read_snapshot_located;

pub fn run(a: &PlanArgs, io: &mut Io) -> u8 {
    let loaded = match load_repo(&a.repo, io) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let prefix = display_prefix(&a.repo.path);
    let report = validate::validate(
        &loaded,
        &Options {
            path_prefix: prefix.clone(),
            ..Options::default()
        },
    );
    if report.count(Severity::Error) > 0 {
        let errors: Vec<_> = report
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .cloned()
            .collect();
        let style = render::Style::for_stream(io.err_is_terminal);
        let _ = io.err.write_all(render::text(&errors, style).as_bytes());
        io.log(&format!(
            "error: the configuration in {} is invalid; plan needs a valid repository",
            a.repo.path.display()
        ));
        io.log("hint: run `dovetail validate` for every diagnostic");
        return exit::ERROR;
    }
    let gates = match super::feature_gates(a.feature_gates.as_deref(), Default::default()) {
        Ok(g) => g,
        Err(e) => {
            io.log(&format!("error: {e}"));
            return exit::ERROR;
        }
    };
    let mut config = ConfigDocs::from_report(&report);
    let statics = config.take_static();
    if !statics.is_empty() {
        io.log(&format!(
            "note: static NodePool(s) {} take no pending pods; they keep spec.replicas nodes{}",
            statics.join(", "),
            if gates.static_capacity {
                ""
            } else {
                " once the StaticCapacity feature gate is on (it is off: they are inactive)"
            }
        ));
    }
    if !config.overlays.is_empty() && !gates.node_overlay {
        io.log(&format!(
            "note: NodeOverlay(s) {} are not applied: the NodeOverlay feature gate is off",
            config
                .overlays
                .iter()
                .map(|o| o.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        config.overlays.clear();
    }
    let catalog = match read_catalog(&a.catalog) {
        Ok(c) => c,
        Err(e) => {
            io.error(&e, Some(CATALOG_HINT));
            return exit::ERROR;
        }
    };
    let pods = match read_pods(&a.pods) {
        Ok(p) => p,
        Err(e) => {
            io.read_error(
                &e,
                "--pods takes Pod manifests: multi-document YAML, a v1/List, or JSON lines",
            );
            return exit::ERROR;
        }
    };
    let snapshot = match a.snapshot.as_deref().map(read_snapshot_located).transpose() {
        Ok(s) => s,
        Err(e) => {
            io.read_error(
                &e,
                "--snapshot takes Kubernetes objects as kubectl prints them (-o yaml or -o json)",
            );
            return exit::ERROR;
        }
    };
    let now_ms = SystemClock.now().as_millisecond();
    let input = match nodepool_specs_with_overlays(&config, &catalog).and_then(|(specs, o)| {
        for (name, verdict) in &o.verdicts {
            if let Some(reason) = verdict.reason() {
                io.log(&format!(
                    "warning: NodeOverlay {name} is not applied ({reason}): {}",
                    verdict.message()
                ));
            }
        }
        build_input_from(
            specs,
            &catalog,
            &pods,
            &a.pods.display().to_string(),
            snapshot.as_ref().map(|(s, o)| (s, o)),
            now_ms,
            &mut KeptExisting::default(),
        )
    }) {
        Ok(i) => i,
        Err(e) => {
            io.diagnostics(&[e.diagnostic()]);
            return exit::ERROR;
        }
    };
    let opts = SolveOptions {
        preferences: a.preferences.into(),
        now_ms,
    };
    let start = Instant::now();
    let result = match solve(&input, &opts) {
        Ok(r) => r,
        Err(e) => {
            io.error(&e, None);
            return exit::ERROR;
        }
    };
    let mut raw: Vec<&crate::api::SlimPod> = pods.iter().map(|(_, p)| p).collect();
    if let Some((s, _)) = &snapshot {
        raw.extend(s.pods.iter().map(AsRef::as_ref));
    }
    let plan = crate::plan::report(&result, start.elapsed().as_secs_f64(), &input, &raw);
    drop(raw);
    match a.output {
        OutputFormat::Json => io.data(&format!("{}\n", plan.to_json())),
        _ => io.data(&format!("{plan}")),
    }
    let code = if plan.all_placed() {
        exit::OK
    } else {
        exit::PROBLEM
    };
    // The process exits next: freeing tens of thousands of pods, their
    // requirements and the solver's result one by one would only add to
    // the wall time (14% of it on 20,000 pods).
    std::mem::forget((
        pods, snapshot, input, result, plan, catalog, config, report, loaded,
    ));
    code
}
