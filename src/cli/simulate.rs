//! `dovetail simulate`.

use std::path::Path;

use super::args::{OutputFormat, SimulateArgs};
use super::{Io, exit, render};
use crate::simulate::driver::{SimError, Simulation};
use crate::simulate::scenario;

/// The bundled demo: its scenario is compiled in, and it runs against the
/// checkout's `examples-repo/`.
const DEMO: &str = include_str!("../../tests/scenarios/demo.yaml");
const DEMO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scenarios");

/// Events printed by the text output before it refers to the JSON report.
const TEXT_EVENTS: usize = 200;

pub fn run(a: &SimulateArgs, io: &mut Io) -> u8 {
    if !matches!(a.output, OutputFormat::Text | OutputFormat::Json) {
        io.log("error: simulate prints --output text or json");
        return exit::ERROR;
    }
    let parsed = match &a.scenario {
        Some(path) => scenario::load(path),
        None => scenario::parse("(bundled demo)", Path::new(DEMO_DIR), DEMO.as_bytes()),
    };
    let scenario = match parsed {
        Ok(s) => s,
        Err(d) => {
            let style = render::Style::for_stream(io.err_is_terminal);
            let _ = io.err.write_all(render::text(&[*d], style).as_bytes());
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
        Some(_) => {
            io.log("error: --until takes a duration such as 90m or 24h");
            return exit::ERROR;
        }
    };
    let sim = Simulation::new(scenario, a.catalog.as_deref());
    let report = match sim.and_then(|s| s.run(until)) {
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
    match a.output {
        OutputFormat::Json => io.data(&format!("{}\n", report.to_json())),
        _ => io.data(&report.to_text(TEXT_EVENTS)),
    }
    exit::OK
}
