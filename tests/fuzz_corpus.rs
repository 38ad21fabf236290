//! Every fuzz target's body (`dovetail::fuzzing`) over its committed corpus
//! (`fuzz/corpus/TARGET/`) on the stable toolchain: an input that once
//! crashed a target, kept in its corpus, keeps failing this test until the
//! crash is fixed. libFuzzer itself runs the targets in `.ci/fuzz`.

use crate::support::root;

#[test]
fn every_fuzz_target_survives_its_corpus() {
    for (target, body) in dovetail::fuzzing::TARGETS {
        let inputs = corpus(target);
        assert!(!inputs.is_empty(), "{target}: empty corpus");
        for (path, data) in inputs {
            let run = std::panic::catch_unwind(|| body(&data));
            assert!(
                run.is_ok(),
                "{target} panicked on {} ({} bytes)",
                path.display(),
                data.len()
            );
        }
    }
}

/// Every input of a target's corpus, in file name order.
fn corpus(target: &str) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let dir = root().join("fuzz/corpus").join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a corpus entry").path())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let data = std::fs::read(&p).expect("a corpus file");
            (p, data)
        })
        .collect()
}

/// CI's short fuzz run on the stable toolchain: every target on random
/// mutations of its corpus (libFuzzer's kinds of mutation, without its
/// coverage feedback) for `DOVETAIL_FUZZ_SECONDS` each (default 20),
/// seeded by `DOVETAIL_FUZZ_SEED` (default fixed, so a run is
/// reproducible). No input may panic, nor take longer than 5 s (this is
/// a debug build; libFuzzer's bound, on a release build, is 1 s). The
/// coverage-guided runs are libFuzzer's (`.ci/fuzz`, docs/fuzzing.md).
#[test]
fn every_fuzz_target_survives_mutations_of_its_corpus() {
    let seconds: u64 = std::env::var("DOVETAIL_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("DOVETAIL_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x00d0_7e11);
    let mut failures = Vec::new();
    for (i, (target, body)) in dovetail::fuzzing::TARGETS.iter().enumerate() {
        let inputs: Vec<Vec<u8>> = corpus(target).into_iter().map(|(_, data)| data).collect();
        let run = dovetail::fuzzing::run_mutations(
            *body,
            &inputs,
            std::time::Duration::from_secs(seconds),
            seed.wrapping_add(i as u64),
        );
        println!(
            "{target}: {} executions in {seconds} s (seed {}), slowest {:.3} s",
            run.executions,
            seed.wrapping_add(i as u64),
            run.slowest
        );
        if let Some((input, message)) = run.crash {
            failures.push(format!(
                "{target} panicked ({message}) on {:?}",
                String::from_utf8_lossy(&input)
            ));
        } else if run.slowest > 5.0 {
            failures.push(format!("{target}: an input took {:.2} s", run.slowest));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every fuzz binary of `fuzz/Cargo.toml` is a target here, and the other
/// way round.
#[test]
fn the_fuzz_crate_builds_every_target() {
    let manifest =
        std::fs::read_to_string(root().join("fuzz/Cargo.toml")).expect("fuzz/Cargo.toml");
    let bins: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|n| *n != "dovetail-fuzz")
        .collect();
    let targets: Vec<&str> = dovetail::fuzzing::TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(bins, targets);
}
