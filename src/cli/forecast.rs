//! `diff --forecast`: the command line's side of a forecast (see
//! `simulate::forecast`): its settings, the snapshot it starts from (a file
//! or the live cluster), and the sides' configurations.

use std::path::Path;

use super::args::DiffArgs;
use super::{Io, exit};
use crate::config::validate::Object;
use crate::simulate::driver::{SimError, manifests_of};
use crate::simulate::forecast::{self, Forecast, ForecastError, Settings, Side, Start};
use crate::simulate::report::Report;
use crate::snapshot::Located;
use crate::timing::{DurationSyntax, NillableDuration, parse_duration};

/// The settings of `--forecast`, or a message for a usage error.
pub(super) fn settings(a: &DiffArgs) -> Result<Option<Settings>, String> {
    if !a.forecast {
        return Ok(None);
    }
    if a.snapshot.is_none() && !a.cluster {
        return Err(
            "--forecast needs the cluster to start from: --snapshot FILE (as `dovetail snapshot` writes it) or --cluster"
                .into(),
        );
    }
    let duration = |flag: &str, v: &str| match parse_duration(v, DurationSyntax::Hms) {
        Ok(NillableDuration::After(d)) => Ok(d),
        _ => Err(format!("{flag} {v}: takes a duration such as 90m or 24h")),
    };
    let window = duration("--for", &a.forecast_for)?;
    if window.is_zero() || window > crate::simulate::scenario::MAX_DURATION {
        return Err(format!(
            "--for {}: between 1s and 744h (31 days)",
            a.forecast_for
        ));
    }
    Ok(Some(Settings {
        window,
        catalog: a.catalog.clone(),
        launch_delay: duration("--launch-delay", &a.launch_delay)?,
        scales: a.scale.clone(),
        feature_gates: super::feature_gates(a.feature_gates.as_deref(), Default::default())?,
        preferences: a.preference_policy.map(Into::into).unwrap_or_default(),
        reservations: a.reservation.iter().cloned().collect(),
    }))
}

/// The snapshot file, made ready to start from.
pub(super) fn start_from_file(path: &Path, io: &mut Io) -> Result<Start, u8> {
    let objects = crate::snapshot::read_objects(path).map_err(|e| {
        io.read_error(
            &e,
            "--snapshot takes Kubernetes objects as kubectl prints them (-o yaml or -o json)",
        );
        exit::ERROR
    })?;
    prepared(&path.display().to_string(), objects, io)
}

/// A live cluster's snapshot, made ready to start from.
pub(super) fn start_from_values(values: Vec<serde_json::Value>, io: &mut Io) -> Result<Start, u8> {
    let objects: Vec<Located> = values
        .into_iter()
        .map(|object| Located { line: 0, object })
        .collect();
    prepared("(live cluster)", objects, io)
}

fn prepared(file: &str, objects: Vec<Located>, io: &mut Io) -> Result<Start, u8> {
    forecast::prepare(file, objects).map_err(|e| {
        io.error(&e, None);
        exit::ERROR
    })
}

/// One side: its label and the EC2NodeClasses and NodePools of its
/// configuration.
pub(super) fn side(label: String, objects: &[Object], path: &str) -> Side {
    Side::new(label, manifests_of(objects, path))
}

/// Runs both sides; an error is printed with its diagnostics. With
/// `reports`, each side's whole report is written there as `simulate`
/// writes it (`a.json`, `a.html`, `b.json`, `b.html`), and the two fleets
/// overlaid on one page (`forecast.html`).
pub(super) fn run(
    start: &Start,
    settings: &Settings,
    (a, b): (Side, Side),
    reports: Option<&Path>,
    io: &mut Io,
) -> Result<Forecast, u8> {
    if let Some(unknown) = settings
        .reservations
        .keys()
        .find(|id| !start.reservations.iter().any(|r| &r.id == *id))
    {
        io.log(&format!(
            "error: --reservation {unknown}: no EC2NodeClass in the snapshot holds this reservation (its status.capacityReservations)"
        ));
        return Err(exit::ERROR);
    }
    let run = forecast::run(start, settings, a, b).map_err(|e| {
        if let ForecastError::Simulation {
            source: SimError::Input(d) | SimError::InvalidConfig { diagnostics: d, .. },
            ..
        } = &e
        {
            io.diagnostics(d);
        }
        io.error(&e, None);
        exit::ERROR
    })?;
    if let Some(dir) = reports {
        let f = &run.forecast;
        write_reports(dir, (&run.a, &f.a.label), (&run.b, &f.b.label)).map_err(|e| {
            io.error(
                &e,
                Some("check that the --forecast-reports directory can be written"),
            );
            exit::ERROR
        })?;
    }
    let mut forecast = run.forecast;
    forecast.reports = reports.map(|d| d.display().to_string());
    Ok(forecast)
}

fn write_reports(
    dir: &Path,
    (a, la): (&Report, &str),
    (b, lb): (&Report, &str),
) -> Result<(), crate::fsutil::WriteError> {
    std::fs::create_dir_all(dir).map_err(|source| crate::fsutil::WriteError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for (name, report) in [("a", a), ("b", b)] {
        crate::fsutil::write_file(
            &dir.join(format!("{name}.json")),
            format!("{}\n", report.to_json()).as_bytes(),
        )?;
        crate::fsutil::write_file(
            &dir.join(format!("{name}.html")),
            crate::simulate::html::render(report).as_bytes(),
        )?;
    }
    crate::fsutil::write_file(
        &dir.join("forecast.html"),
        crate::simulate::html::render_comparison(a, la, b, lb).as_bytes(),
    )?;
    Ok(())
}
