//! The bodies of the fuzz targets (`fuzz/`, cargo-fuzz) over every parser
//! of input dovetail takes from users, the API server and the cloud. Each
//! takes raw bytes and must neither panic nor hang; where a parser has an
//! invariant cheap to state, the body asserts it too. `tests/fuzz_corpus.rs`
//! runs every body over the committed corpus on the stable toolchain, so a
//! crash once found stays fixed without libFuzzer.
//!
//! The targets, each with its corpus under `fuzz/corpus/`: YAML, `validate`,
//! durations, cron schedules, quantities, label and field selectors, patches,
//! EventBridge messages and snapshots. `tests/fuzz_corpus.rs` also runs each
//! body over seeded mutations of its corpus; `.ci/fuzz` runs the targets under
//! libFuzzer (`docs/fuzzing.md`).

use serde_json::Value;

use crate::cluster::Selector;
use crate::config::yaml::{Limits, parse_documents};
use crate::timing::{self, DurationSyntax, NillableDuration, Schedule};
use crate::world::serve::patch::{self, PatchType};
use crate::world::serve::query::FieldSelector;

/// A target's body: raw bytes in, a panic for a failure.
pub type Target = fn(&[u8]);

/// Every target, by the name of its corpus directory and fuzz binary.
pub const TARGETS: &[(&str, Target)] = &[
    ("yaml", yaml),
    ("validate", validate),
    ("duration", duration),
    ("cron", cron),
    ("quantity", quantity),
    ("label_selector", label_selector),
    ("field_selector", field_selector),
    ("patch", patch),
    ("eventbridge", eventbridge),
    ("snapshot", snapshot),
];

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// The YAML reader (the fast line reader where it applies, else the
/// general parser): reading twice gives the same documents and problems.
pub fn yaml(data: &[u8]) {
    let limits = Limits::default();
    let first = parse_documents("fuzz.yaml", data, &limits);
    let again = parse_documents("fuzz.yaml", data, &limits);
    assert_eq!(first, again, "the same bytes read twice differ");
    for doc in &first.docs {
        let _ = doc.root.to_json();
    }
}

/// `dovetail validate` on one file of a repository.
pub fn validate(data: &[u8]) {
    let loaded = crate::config::load::parse_one("fuzz.yaml", data, &Limits::default());
    let report =
        crate::config::validate::validate(&loaded, &crate::config::validate::Options::default());
    // Every diagnostic names a position in the file or none.
    for d in &report.diagnostics {
        assert!(d.file.is_empty() || d.file == "fuzz.yaml", "{d:?}");
    }
}

/// Go durations and Karpenter's duration fields.
pub fn duration(data: &[u8]) {
    let Some(s) = text(data) else { return };
    if let Ok(nanos) = timing::parse_go_duration(s) {
        assert!(nanos.unsigned_abs() <= 1 << 63, "{s:?}: {nanos}");
    }
    for syntax in [
        DurationSyntax::HmsOrNever,
        DurationSyntax::Hms,
        DurationSyntax::HoursMinutes,
    ] {
        if let Ok(NillableDuration::After(d)) = timing::parse_duration(s, syntax) {
            // What Karpenter's ParseDuration would accept: within int64 ns.
            assert!(d.as_nanos() <= i64::MAX as u128, "{s:?}: {d:?}");
        }
    }
}

/// Budget schedules, and their next activations.
pub fn cron(data: &[u8]) {
    let Some(s) = text(data) else { return };
    let Ok(schedule) = Schedule::parse(s) else {
        return;
    };
    let mut t = crate::clock::Timestamp::UNIX_EPOCH;
    for _ in 0..3 {
        let Some(next) = schedule.next_after(t) else {
            break;
        };
        assert!(next > t, "{s:?}: {next} is not after {t}");
        t = next;
    }
}

/// Quantities, in every canonical unit.
pub fn quantity(data: &[u8]) {
    let Some(s) = text(data) else { return };
    let milli = crate::model::quantity::parse_scaled(s, 3);
    let whole = crate::model::quantity::parse_scaled(s, 0);
    assert_eq!(milli.is_ok(), whole.is_ok(), "{s:?}");
    if let (Ok(m), Ok(w)) = (milli, whole)
        && w > 0
        && w < i64::MAX / 1000
    {
        // Both round up: the whole units hold the thousandths.
        assert!(m <= w * 1000 && m > (w - 1) * 1000, "{s:?}: {m} milli, {w}");
    }
}

/// Label selectors, matched against a few label sets.
pub fn label_selector(data: &[u8]) {
    let Some(s) = text(data) else { return };
    let Ok(selector) = Selector::parse(s) else {
        return;
    };
    let sets = [vec![], vec![("a", "x")], vec![("a", "5"), ("b", "")]];
    for set in sets {
        let labels = set
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let _ = selector.matches(&labels);
    }
}

/// Field selectors.
pub fn field_selector(data: &[u8]) {
    let Some(s) = text(data) else { return };
    if let Ok(f) = FieldSelector::parse(s) {
        let _ = f.matches(&serde_json::json!({"metadata": {"name": "a"}}));
    }
}

/// JSON, merge and strategic merge patches: the first byte picks the
/// kind, a NUL byte separates the target (a pod when it is not JSON) from
/// the patch.
pub fn patch(data: &[u8]) {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let kind = match kind % 3 {
        0 => PatchType::Json,
        1 => PatchType::Merge,
        _ => PatchType::Strategic,
    };
    let (target, body) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (&[][..], rest),
    };
    let target: Value = serde_json::from_slice(target).unwrap_or_else(|_| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "x"}, "finalizers": ["f"]},
            "spec": {"containers": [{"name": "a", "image": "i", "ports": [{"containerPort": 80}]}]}
        })
    });
    let _ = patch::apply(kind, &target, body);
}

/// EventBridge messages from the interruption queue.
pub fn eventbridge(data: &[u8]) {
    let _ = crate::interruption::message::parse_bytes(data);
}

/// Snapshot and scenario files: objects, then the snapshot built from them.
pub fn snapshot(data: &[u8]) {
    let Some(s) = text(data) else { return };
    if let Ok(objects) = crate::snapshot::parse_objects("fuzz.yaml", s) {
        let _ = crate::snapshot::snapshot_from_objects("fuzz.yaml", &objects);
    }
}

/// A small, seeded generator (xorshift64*) for [`mutate`]: reproducible
/// from its seed, no dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Bytes that parsers treat specially, for [`mutate`] to put in.
const INTERESTING: &[&[u8]] = &[
    b"\0",
    b"\n",
    b"\r\n",
    b"\t",
    b" ",
    b":",
    b"-",
    b"#",
    b"'",
    b"\"",
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b"=",
    b"!",
    b"!=",
    b"==",
    b"(",
    b")",
    b".",
    b"e",
    b"E",
    b"+",
    b"*",
    b"/",
    b"?",
    b"&",
    b"|",
    b">",
    b"<",
    b"~",
    b"$patch",
    b"null",
    b"true",
    b"0",
    b"-1",
    b"9223372036854775807",
    b"18446744073709551616",
    b"1e308",
    b"NaN",
    b"\xc3\xa9",
    b"\xff",
    b"\xe2\x80\xa8",
    b"---",
    b"...",
    b"<<",
    b"@",
    b"%",
    b"`",
];

/// One random mutation of `input` (libFuzzer's kinds, without coverage
/// feedback): flip a bit, set a byte, insert or replace with a special
/// token or a piece of another corpus input, delete or duplicate a range,
/// or splice two inputs.
pub fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut out = input.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let len = out.len();
        let at = rng.below(len + 1);
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = rng.next_u64() as u8;
            }
            2 => {
                let token = INTERESTING[rng.below(INTERESTING.len())];
                out.splice(at..at, token.iter().copied());
            }
            3 if len > 0 => {
                let end = (at + 1 + rng.below(16)).min(len);
                out.drain(at.min(len - 1)..end.max(at.min(len - 1)));
            }
            4 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(32)).min(len);
                let piece = out[start..end].to_vec();
                out.splice(at..at, piece);
            }
            5 if !corpus.is_empty() => {
                let other = &corpus[rng.below(corpus.len())];
                if !other.is_empty() {
                    let start = rng.below(other.len());
                    let end = (start + 1 + rng.below(64)).min(other.len());
                    out.splice(at..at, other[start..end].iter().copied());
                }
            }
            6 if !corpus.is_empty() => {
                let other = &corpus[rng.below(corpus.len())];
                let cut = rng.below(other.len() + 1);
                out.truncate(at);
                out.extend_from_slice(&other[cut..]);
            }
            _ => {
                let token = INTERESTING[rng.below(INTERESTING.len())];
                let end = (at + token.len()).min(len);
                out.splice(at..end, token.iter().copied());
            }
        }
        out.truncate(64 * 1024);
    }
    out
}

/// What a mutation run found.
#[derive(Debug)]
pub struct MutationRun {
    /// Inputs run.
    pub executions: u64,
    /// The slowest input, in seconds.
    pub slowest: f64,
    /// The first input that panicked, and the panic's message.
    pub crash: Option<(Vec<u8>, String)>,
}

/// Runs `target` on mutations of `corpus` for `time` (seeded by `seed`):
/// each input a random corpus input mutated, stopping at the first panic.
pub fn run_mutations(
    target: Target,
    corpus: &[Vec<u8>],
    time: std::time::Duration,
    seed: u64,
) -> MutationRun {
    let mut rng = Rng::new(seed);
    let start = std::time::Instant::now();
    let mut run = MutationRun {
        executions: 0,
        slowest: 0.0,
        crash: None,
    };
    let empty = Vec::new();
    while start.elapsed() < time {
        let base = if corpus.is_empty() {
            &empty
        } else {
            &corpus[rng.below(corpus.len())]
        };
        let input = mutate(&mut rng, base, corpus);
        let began = std::time::Instant::now();
        let result = std::panic::catch_unwind(|| target(&input));
        run.slowest = run.slowest.max(began.elapsed().as_secs_f64());
        run.executions += 1;
        if let Err(panic) = result {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            run.crash = Some((input, message));
            break;
        }
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_reproducible_from_the_seed_and_vary() {
        let corpus = vec![b"a: 1\nb: [x, y]\n".to_vec(), b"app=web,tier!=db".to_vec()];
        let run = |seed| {
            let mut rng = Rng::new(seed);
            (0..200)
                .map(|i| mutate(&mut rng, &corpus[i % 2], &corpus))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let distinct: std::collections::BTreeSet<Vec<u8>> = run(7).into_iter().collect();
        assert!(distinct.len() > 150, "{}", distinct.len());
    }

    #[test]
    fn a_panicking_target_is_caught_with_its_input() {
        fn picky(data: &[u8]) {
            assert!(!data.contains(&b'!'), "found a bang");
        }
        let corpus = vec![b"abc".to_vec()];
        let run = run_mutations(picky, &corpus, std::time::Duration::from_secs(5), 1);
        let (input, message) = run.crash.expect("a bang is inserted within 5 s");
        assert!(input.contains(&b'!'));
        assert!(message.contains("found a bang"), "{message}");
    }
}
