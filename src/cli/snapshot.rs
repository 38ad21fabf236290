//! `dovetail snapshot`: the state of a live cluster as a snapshot file (a
//! `v1/List` of the kinds CONVENTIONS.md names), for `plan --snapshot`,
//! `diff --impact --snapshot` and `simulate`.

use std::path::Path;

use super::args::SnapshotArgs;
use super::live;
use super::{Io, exit};

pub fn run(a: &SnapshotArgs, io: &mut Io) -> u8 {
    let connected = live::runtime().and_then(|rt| {
        let client = rt.block_on(live::connect())?;
        Ok((rt, client))
    });
    match connected {
        Ok((rt, client)) => write_snapshot(a, io, &rt, &client),
        Err(e) => {
            io.error(&e, e.hint());
            exit::ERROR
        }
    }
}

/// Lists the cluster through `client` and writes the snapshot.
pub(crate) fn write_snapshot(
    a: &SnapshotArgs,
    io: &mut Io,
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
) -> u8 {
    let snapshot = match rt.block_on(live::snapshot(client)) {
        Ok(s) => s,
        Err(e) => {
            io.error(&e, e.hint());
            return exit::ERROR;
        }
    };
    let count = snapshot["items"].as_array().map_or(0, Vec::len);
    let (format, file) = match destination(a, io) {
        Ok(d) => d,
        Err(message) => {
            io.log(&format!("error: {message}"));
            return exit::ERROR;
        }
    };
    let text = render(&snapshot, format);
    match &file {
        None => io.data(&text),
        Some(path) => {
            if let Err(e) = crate::fsutil::write_file(path, text.as_bytes()) {
                io.error(
                    &e,
                    Some(&format!(
                        "check that `{}` can be written and is not a symlink",
                        path.display()
                    )),
                );
                return exit::ERROR;
            }
            io.log(&format!(
                "snapshot: {count} objects written to {}",
                path.display()
            ));
        }
    }
    exit::OK
}

/// A snapshot as the file's text.
pub(crate) fn render(snapshot: &serde_json::Value, format: Format) -> String {
    match format {
        Format::Yaml => crate::config::diff::normalise::to_yaml(snapshot),
        Format::Json => serde_json::to_string_pretty(snapshot).unwrap_or_default() + "\n",
    }
}

/// The format of a snapshot file by its extension: YAML for `.yaml` and
/// `.yml`, else JSON.
pub(crate) fn format_of(path: &Path) -> Format {
    if is_yaml(path) {
        Format::Yaml
    } else {
        Format::Json
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Yaml,
    Json,
}

/// The format and the file of `--output FORMAT [--out-file FILE]`, or of
/// the deprecated `--output FILE` (which prints a note).
fn destination(
    a: &SnapshotArgs,
    io: &mut Io,
) -> Result<(Format, Option<std::path::PathBuf>), String> {
    let by_extension = format_of;
    match (a.output.as_deref(), &a.out_file) {
        (None, None) => Ok((Format::Json, None)),
        (None, Some(f)) => Ok((by_extension(f), Some(f.clone()))),
        (Some("yaml" | "yml"), f) => Ok((Format::Yaml, f.clone())),
        (Some("json"), f) => Ok((Format::Json, f.clone())),
        (Some(other), Some(_)) => Err(format!(
            "--output takes a format, yaml or json, not {other:?}"
        )),
        (Some(old), None) => {
            let f = std::path::PathBuf::from(old);
            let format = by_extension(&f);
            io.log(&format!(
                "note: `--output FILE` is deprecated: --output is the format; use `--output {} --out-file {old}`",
                if format == Format::Yaml { "yaml" } else { "json" }
            ));
            Ok((format, Some(f)))
        }
    }
}

fn is_yaml(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}
