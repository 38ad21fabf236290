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
    let yaml = a.output.as_deref().is_some_and(is_yaml);
    let text = if yaml {
        crate::config::diff::normalise::to_yaml(&snapshot)
    } else {
        serde_json::to_string_pretty(&snapshot).unwrap_or_default() + "\n"
    };
    match &a.output {
        None => io.data(&text),
        Some(path) => {
            if let Err(e) = std::fs::write(path, text) {
                io.error(
                    &e,
                    Some(&format!("check that `{}` can be written", path.display())),
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

fn is_yaml(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}
