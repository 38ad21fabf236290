//! Every fuzz target's body (`dovetail::fuzzing`) over its committed corpus
//! (`fuzz/corpus/TARGET/`) on the stable toolchain: an input that once
//! crashed a target, kept in its corpus, keeps failing this test until the
//! crash is fixed. libFuzzer itself runs the targets in `.ci/fuzz`.

use crate::support::root;

#[test]
fn every_fuzz_target_survives_its_corpus() {
    for (target, body) in dovetail::fuzzing::TARGETS {
        let dir = root().join("fuzz/corpus").join(target);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("a corpus entry").path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{target}: empty corpus");
        for input in inputs {
            let data = std::fs::read(&input).expect("a corpus file");
            let run = std::panic::catch_unwind(|| body(&data));
            assert!(
                run.is_ok(),
                "{target} panicked on {} ({} bytes)",
                input.display(),
                data.len()
            );
        }
    }
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
