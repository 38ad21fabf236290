//! dovetail's parsers against the Go implementations they mirror (issue 40,
//! item 2): the testbed's `oracle` (testbed/cmd/oracle) answers with
//! `time.ParseDuration`, the CRDs' patterns as the API server matches them,
//! Karpenter's cron (robfig/cron), `resource.ParseQuantity`, `labels.Parse`,
//! `fields.ParseSelector`, sigs.k8s.io/yaml, the API server's JSON and merge
//! patches and `strategicpatch`.
//!
//! Each comparison runs its seeds (the cases that found differences, and
//! the edges each syntax is known for) and then generated inputs from a
//! fixed seed, so a run is repeatable; `DOVETAIL_DIFFERENTIAL_CASES` sets how
//! many (default 2,000 per comparison) and `DOVETAIL_DIFFERENTIAL_SEED` a
//! seed of its own for a longer search. A difference fails the test with
//! the input, shrunk, unless it is one of the kept differences each
//! comparison names with its reason (also in `docs/differential.md`, with
//! the counts each comparison prints).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{Value, json};

use dovetail::cluster::Selector;
use dovetail::timing::{self, DurationSyntax, NillableDuration, Schedule};
use dovetail::world::serve::patch::{self, PatchType};
use dovetail::world::serve::query::FieldSelector;

/// The Go oracle, one process for a whole comparison.
struct Oracle {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Oracle {
    fn start() -> Oracle {
        let path = crate::testbed::bin().join("oracle");
        let mut child = Command::new(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e} (built by testbed/build)", path.display()));
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Oracle {
            child,
            stdin,
            stdout,
        }
    }

    /// The oracle's answer: `Ok(out)`, or `Err` with Go's error.
    fn ask(&mut self, request: Value) -> Result<Value, String> {
        writeln!(self.stdin, "{request}").expect("the oracle reads");
        self.stdin.flush().expect("the oracle reads");
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("the oracle answers");
        let answer: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the oracle's answer {line:?}: {e}"));
        if answer["ok"] == true {
            Ok(answer["out"].clone())
        } else {
            // A panic is a refusal too: the API server answers it with a
            // 500 (strategicpatch panics on some `$retainKeys`).
            Err(answer["err"].as_str().unwrap_or_default().to_string())
        }
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one comparison found for one input.
enum Verdict {
    Agree,
    /// A difference kept on purpose, with the reason.
    Kept(&'static str),
    Differ(String),
}

fn verdict<T: PartialEq + std::fmt::Debug, E, F>(
    ours: Result<T, E>,
    theirs: Result<T, F>,
) -> Verdict
where
    E: std::fmt::Display,
    F: std::fmt::Display,
{
    match (ours, theirs) {
        (Ok(a), Ok(b)) if a == b => Verdict::Agree,
        (Err(_), Err(_)) => Verdict::Agree,
        (Ok(a), Ok(b)) => Verdict::Differ(format!("dovetail {a:?}, Go {b:?}")),
        (Ok(a), Err(e)) => Verdict::Differ(format!("dovetail accepts ({a:?}), Go refuses: {e}")),
        (Err(e), Ok(b)) => Verdict::Differ(format!("dovetail refuses ({e}), Go accepts: {b:?}")),
    }
}

fn regex(pattern: &str) -> proptest::string::RegexGeneratorStrategy<String> {
    proptest::string::string_regex(pattern).expect("a generator's pattern")
}

fn cases() -> u32 {
    std::env::var("DOVETAIL_DIFFERENTIAL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

/// Runs `check` on every seed and on generated inputs; prints the tally
/// (inputs, agreements, kept differences by reason) and fails on the first
/// difference, shrunk, or on any seed that differs.
fn compare<S>(
    name: &str,
    seeds: &[S::Value],
    strategy: S,
    check: impl Fn(&mut Oracle, &S::Value) -> Verdict,
) where
    S: Strategy,
    S::Value: Clone + std::fmt::Debug,
{
    let oracle = RefCell::new(Oracle::start());
    let tally: RefCell<(usize, usize, BTreeMap<&'static str, usize>)> = RefCell::default();
    let run = |input: &S::Value| -> Verdict {
        let v = check(&mut oracle.borrow_mut(), input);
        let mut t = tally.borrow_mut();
        t.0 += 1;
        match &v {
            Verdict::Agree => t.1 += 1,
            Verdict::Kept(why) => *t.2.entry(why).or_default() += 1,
            Verdict::Differ(_) => {}
        }
        v
    };
    let differences: Vec<String> = seeds
        .iter()
        .filter_map(|s| match run(s) {
            Verdict::Differ(d) => Some(format!("{s:?}: {d}")),
            _ => None,
        })
        .collect();
    assert!(
        differences.is_empty(),
        "{name}: {} seeds differ:\n{}",
        differences.len(),
        differences.join("\n")
    );
    let rng = match std::env::var("DOVETAIL_DIFFERENTIAL_SEED") {
        Ok(seed) => {
            let mut bytes = [0u8; 32];
            for (i, b) in seed.bytes().enumerate() {
                bytes[i % 32] ^= b;
            }
            TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
        }
        Err(_) => TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    };
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(config, rng);
    let result = runner.run(&strategy, |input| match run(&input) {
        Verdict::Differ(d) => Err(TestCaseError::fail(format!("{input:?}: {d}"))),
        _ => Ok(()),
    });
    let (inputs, agreed, kept) = tally.into_inner();
    eprintln!("{name}: {inputs} inputs, {agreed} agree, kept {kept:?}");
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

// ---------------------------------------------------------------------------
// Durations

fn go_duration_strings() -> impl Strategy<Value = String> {
    prop_oneof![
        "[-+]?([0-9]{0,3}(\\.[0-9]{0,3})?(ns|us|µs|μs|ms|s|m|h|d|)){1,3}",
        "[-+]?[0-9]{1,21}(\\.[0-9]{1,21})?(ns|s|h)",
        "[-+0-9.nsuµmh ]{0,8}",
    ]
}

#[test]
fn go_durations_parse_as_time_parse_duration() {
    let seeds: Vec<String> = [
        "0",
        "-0",
        "+0",
        "",
        "1",
        "1.000000001s",
        "0.1ns",
        "1.5ns",
        ".5s",
        "5.s",
        "1h-2m",
        "2562047h47m16.854775807s",
        "2562047h47m16.854775808s",
        "9223372036854775807ns",
        "9223372036854775808ns",
        "-9223372036854775808ns",
        "9223372036854775808ns9223372036854775808ns",
        "9223372036854775807ns9223372036854775807ns",
        "0.0000000001s",
        "1e3s",
        "00001s",
        "1.9999999999ns",
        "3.0000000009ns",
    ]
    .map(String::from)
    .to_vec();
    compare(
        "time.ParseDuration",
        &seeds,
        go_duration_strings(),
        |o, s| {
            let theirs = o.ask(json!({"op": "duration", "in": s})).map(|v| {
                v.as_str()
                    .and_then(|n| n.parse::<i128>().ok())
                    .expect("nanoseconds")
            });
            verdict(timing::parse_go_duration(s), theirs)
        },
    );
}

/// The `pattern` of a property of the reference NodePool CRD, wherever it
/// is declared.
fn nodepool_pattern(property: &str) -> String {
    fn find(v: &Value, property: &str) -> Option<String> {
        if let Some(p) = v["properties"][property]["pattern"].as_str() {
            return Some(p.to_string());
        }
        match v {
            Value::Object(m) => m.values().find_map(|c| find(c, property)),
            Value::Array(a) => a.iter().find_map(|c| find(c, property)),
            _ => None,
        }
    }
    let path = crate::support::root()
        .join("../shared/reference/karpenter-v1.14.1-crds/karpenter.sh_nodepools.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let crd: Value = serde_saphyr::from_str(&text).expect("the reference CRD");
    find(&crd, property).unwrap_or_else(|| panic!("no pattern for {property}"))
}

/// Karpenter's duration fields as the API server and Karpenter read them:
/// the CRD's pattern, then `time.ParseDuration` (`Never` for the nillable
/// ones); compared in whole seconds.
#[test]
fn karpenter_durations_parse_as_the_crd_and_karpenter_do() {
    let fields = [
        ("consolidateAfter", DurationSyntax::HmsOrNever),
        ("expireAfter", DurationSyntax::HmsOrNever),
        ("terminationGracePeriod", DurationSyntax::Hms),
        ("duration", DurationSyntax::HoursMinutes),
    ];
    let seeds: Vec<String> = [
        "Never",
        "never",
        "0s",
        "1h1h",
        "1h0m0s",
        "8h0s",
        "8h0m",
        "8h0m0s",
        "30m0s",
        "1m1h",
        "0h0m",
        "2562047h",
        "2562048h",
        "153722867m",
        "9223372036s",
        "9223372037s",
        "99999999999999999999h",
        " 1h",
        "1h ",
        "01h",
        "1.5h",
        "-1h",
    ]
    .map(String::from)
    .to_vec();
    for (field, syntax) in fields {
        let pattern = nodepool_pattern(field);
        compare(
            &format!("NodePool {field}"),
            &seeds,
            prop_oneof![
                "([0-9]{1,12}(s|m|h|d|ms)){1,3}(0s)?",
                "[0-9smhNever .]{0,8}"
            ],
            |o, s| {
                let matches =
                    o.ask(json!({"op": "match", "in": s, "pattern": pattern})) == Ok(json!(true));
                let theirs = if !matches {
                    Err("the CRD's pattern does not match".to_string())
                } else if s == "Never" {
                    Ok(NillableDuration::Never)
                } else {
                    o.ask(json!({"op": "duration", "in": s})).map(|v| {
                        let ns: u64 = v
                            .as_str()
                            .and_then(|n| n.parse().ok())
                            .expect("nanoseconds");
                        NillableDuration::After(std::time::Duration::from_nanos(ns))
                    })
                };
                verdict(timing::parse_duration(s, syntax), theirs)
            },
        );
    }
}

/// A budget's schedule: the CRD's pattern, then Karpenter's
/// `cron.ParseStandard("TZ=UTC " + schedule)`; the next activations from
/// a fixed time compared. dovetail refuses what the pattern admits and the
/// cron package cannot parse (Karpenter would fail the budget at run time).
#[test]
fn budget_schedules_parse_as_karpenter_does() {
    let pattern = nodepool_pattern("schedule");
    let seeds: Vec<String> = [
        "@daily",
        "@DAILY",
        "@every 1h",
        "@reboot",
        "0 9 * * MON-FRI",
        "0 9 * * mon-fri",
        "*/15 * * * *",
        "0 0 1 1 *",
        "0 0 L * *",
        "0 0 ? * *",
        "0 0 * * 7",
        "0 0 * * 0-7",
        "0 0 31 2 *",
        "5-59/20 * * * *",
        "0 0 * JAN,jul *",
        "0 0 * * SUN#2",
        "0 0 1W * *",
        "0 0 * * 1/2",
        "60 * * * *",
        "* 24 * * *",
        "0 0 0 * *",
        "0 0 * 13 *",
        "0 0 * * 8",
        "* * * * * *",
        "*/0 * * * *",
        "1,2,,3 * * * *",
        "0 0 * * *\t",
        " 0 0 * * *",
        "0 0 1-31/7 * *",
        "0 0 * * 5-1",
        "30-10 * * * *",
        "TZ=UTC 0 0 * * *",
        "CRON_TZ=Asia/Tokyo 0 0 * * *",
        "0 0 * * SUN-SAT",
        "0 0 * * sunday",
        "0 0 * * 01",
    ]
    .map(String::from)
    .to_vec();
    let field = "(\\*|[0-9]{1,2}|[0-9]{1,2}-[0-9]{1,2}|\\*/[0-9]{1,2}|[0-9]{1,2}(,[0-9]{1,2}){1,2}|MON|jan|SUN-SAT|L|\\?)";
    let from = 1_767_225_600i64; // 2026-01-01T00:00:00Z
    compare(
        "budget schedule",
        &seeds,
        prop_oneof![
            regex(&format!("{field}( {field}){{4}}")),
            regex(&format!("{field}( {field}){{2,5}}")),
            "@(daily|weekly|hourly|yearly|every 1h|reboot|monthly|annually|midnight)",
        ],
        |o, s| {
            let matches =
                o.ask(json!({"op": "match", "in": s, "pattern": pattern})) == Ok(json!(true));
            let theirs = if matches {
                o.ask(json!({"op": "cron", "in": s, "from": from, "count": 8}))
            } else {
                Err("the CRD's pattern does not match".to_string())
            };
            let ours = Schedule::parse(s).map(|schedule| {
                let mut t = jiff::Timestamp::from_second(from).expect("time");
                let mut next = Vec::new();
                for _ in 0..8 {
                    let Some(n) = schedule.next_after(t) else {
                        break;
                    };
                    next.push(json!(n.as_second()));
                    t = n;
                }
                Value::Array(next)
            });
            verdict(ours, theirs)
        },
    );
}

// ---------------------------------------------------------------------------
// Quantities

#[test]
fn quantities_parse_as_resource_parse_quantity() {
    let seeds: Vec<String> = [
        "1",
        "1.5",
        "100m",
        "1.5Gi",
        "1e3",
        "1E3",
        "1e-3",
        "1.e3",
        ".5",
        "5.",
        "+1",
        "-1",
        "0.1m",
        "1n",
        "1.0000000001",
        "1Ki",
        "1ki",
        "1KI",
        "1K",
        "1k",
        "1Mi",
        "1M",
        "1m",
        "1e",
        "1e+",
        "1e+3",
        "1e400",
        "1E",
        "1Ei",
        "9223372036854775807",
        "9223372036854775808",
        "9223372036854775807m",
        "0.0000000000001",
        " 1",
        "1 ",
        "\t1\n",
        "1 Gi",
        "",
        " ",
        "-",
        ".",
        "1..5",
        "1.5.Gi",
        "1u",
        "1µ",
        "0x10",
        "1e3Gi",
        "999999999999999999999999999999999999999999",
        "1e-400",
        "8Ei",
        "9Ei",
        "-9Ei",
        "1.5e1Mi",
    ]
    .map(String::from)
    .to_vec();
    compare(
        "resource.ParseQuantity",
        &seeds,
        prop_oneof![
            "[ ]?[-+]?[0-9]{0,4}(\\.[0-9]{0,4})?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?[0-9]{1,3}|)[ ]?",
            "[-+]?[0-9]{15,25}(\\.[0-9]{1,12})?(m|k|Ei|)",
            "[-+0-9.eEKkMGTPmnui ]{0,7}",
        ],
        |o, s| {
            let theirs = o.ask(json!({"op": "quantity", "in": s}));
            let ours_milli = dovetail::model::quantity::parse_scaled(s, 3);
            let ours_value = dovetail::model::quantity::parse_scaled(s, 0);
            match theirs {
                Err(e) => verdict(ours_milli.map(|_| ()), Err::<(), _>(e)),
                Ok(q) => {
                    let exact: f64 = q["exact"]
                        .as_str()
                        .and_then(|x| x.parse().ok())
                        .unwrap_or(f64::NAN);
                    let field = |f: &str| q[f].as_str().and_then(|x| x.parse::<i64>().ok());
                    // Go's MilliValue and Value are exact only while the value
                    // fits in an int64; beyond, dovetail saturates (its one rule
                    // for such values, model::quantity).
                    let check = |ours: Result<i64, _>, go: Option<i64>, scaled: f64| match ours {
                        Err(e) => Some(format!("dovetail refuses: {e}")),
                        Ok(v) if scaled.abs() < 9.2e18 => {
                            (Some(v) != go).then(|| format!("dovetail {v}, Go {go:?}"))
                        }
                        Ok(v) if v == i64::MAX || v == i64::MIN => None,
                        // Too near the bound for a double to tell.
                        Ok(_) if scaled.abs() < 9.3e18 => None,
                        Ok(v) => Some(format!(
                            "dovetail {v} for a value beyond int64 ({scaled:e})"
                        )),
                    };
                    match check(ours_milli, field("milli"), exact * 1e3)
                        .or_else(|| check(ours_value, field("value"), exact))
                    {
                        Some(_) if exact < 0.0 => Verdict::Kept(NEGATIVE),
                        Some(d) => Verdict::Differ(format!("{d} ({q})")),
                        None => Verdict::Agree,
                    }
                }
            }
        },
    );
}

const NEGATIVE: &str = "a negative quantity: Go's Value() and MilliValue() misround negative fractions (-0.1Ki is -101) and overflow for large negative values (-1000000000000000000m is -2003764205205 milli); dovetail's are exact, rounded towards zero, and no request, limit or capacity may be negative";

// ---------------------------------------------------------------------------
// Selectors

fn label_sets() -> Vec<BTreeMap<String, String>> {
    let set = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>()
    };
    vec![
        set(&[]),
        set(&[("a", "x")]),
        set(&[("a", ""), ("b", "y")]),
        set(&[("a", "x"), ("b", "y"), ("c", "5")]),
        set(&[("a.b/c", "x"), ("in", "notin"), ("c", "-3")]),
        set(&[("b", "x"), ("c", "+7"), ("notin", "in")]),
    ]
}

#[test]
fn label_selectors_parse_and_match_as_labels_parse() {
    let seeds: Vec<String> = [
        "",
        " ",
        "a",
        "!a",
        "a=x",
        "a==x",
        "a!=x",
        "a=",
        "a==",
        "=x",
        "a=x=y",
        "a=x,a=y",
        "a in (x)",
        "a in (x,y)",
        "a in ()",
        "a in (,)",
        "a in (x,)",
        "a in (,x)",
        "a in (x,,y)",
        "a notin (x)",
        "a in(x)",
        "a in x",
        "a in (x",
        "a in (x y)",
        "in in (in)",
        "notin notin (notin)",
        "a,",
        ",a",
        "a,,b",
        "!a=x",
        "! a",
        "!!a",
        "a>3",
        "a<3",
        "c>4",
        "c<-2",
        "c>x",
        "c>",
        "a>=3",
        "a=>3",
        "a.b/c=x",
        "a.b/c/d=x",
        "A=x",
        "a=X_y.z",
        "a=-x",
        "a=x-",
        "a=(x)",
        "a = x",
        " a = x , b ",
        "a\tin\t(x)",
        "a\u{0}=x",
        "a=x\u{0}=y",
        "é=x",
        "a=é",
        "_a=x",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=x",
    ]
    .map(String::from)
    .to_vec();
    let token = "(a|b|c|in|notin|a\\.b/c|x|y|5|-3|\\(|\\)|,|!|=|==|!=|<|>| |[a-c]{1,2})";
    let sets = label_sets();
    compare(
        "labels.Parse",
        &seeds,
        prop_oneof![
            regex(&format!("{token}{{0,9}}")),
            "(!?[abc]( ?(=|==|!=|<|>) ?[x5y]?| (in|notin) \\(([xy,]{0,4})\\))?,?){1,3}",
            "[ -~]{0,10}",
        ],
        |o, s| {
            let theirs = o
                .ask(json!({"op": "labels", "in": s, "sets": sets}))
                .map(|v| v["matches"].clone());
            let ours = Selector::parse(s).map(|sel| {
                Value::Array(sets.iter().map(|l| Value::Bool(sel.matches(l))).collect())
            });
            verdict(ours, theirs)
        },
    );
}

#[test]
fn field_selectors_parse_as_fields_parse_selector() {
    let seeds: Vec<String> = [
        "",
        ",",
        "a=b",
        "a==b",
        "a!=b",
        "a=b=c",
        "a=b!=c",
        "a!=b=c",
        "a=",
        "=b",
        "a",
        " a = b ",
        "a=b,c=d",
        "c=d,a=b",
        "a=b\\,c",
        "a=b\\=c",
        "a=b\\\\",
        "a=b\\",
        "a=b\\x",
        "a\\,b=c",
        "a=b,,c=d",
        "status.phase=Running,spec.nodeName!=",
        "a=é",
        "a==b==c",
        "a!==b",
    ]
    .map(String::from)
    .to_vec();
    compare(
        "fields.ParseSelector",
        &seeds,
        "([a-c.]{0,3}(=|==|!=|!|)[a-c=\\\\, ]{0,3},?){1,3}",
        |o, s| {
            let theirs = o.ask(json!({"op": "fields", "in": s})).map(|v| {
                v.as_array()
                    .expect("requirements")
                    .iter()
                    .map(|r| {
                        let equal = r["operator"] != "!=";
                        (
                            r["field"].as_str().unwrap_or_default().to_string(),
                            equal,
                            r["value"].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect::<Vec<_>>()
            });
            let ours = FieldSelector::parse(s).map(|f| f.terms().to_vec());
            verdict(ours, theirs.map_err(|e| e.to_string()))
        },
    );
}

// ---------------------------------------------------------------------------
// YAML

/// A YAML document from pieces that matter to YAML 1.1 and 1.2 readers:
/// booleans and nulls in their spellings, octal, hex, sexagesimal, floats,
/// quoting, block scalars, flow collections, anchors, comments.
fn yaml_documents() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        prop::sample::select(vec![
            "yes",
            "No",
            "on",
            "OFF",
            "y",
            "n",
            "true",
            "False",
            "TRUE",
            "~",
            "null",
            "Null",
            "",
            "0x1F",
            "0o17",
            "017",
            "08",
            "1_000",
            "1e3",
            "1.0",
            "-1.5e-3",
            ".inf",
            "-.Inf",
            ".NaN",
            "+1",
            "0b101",
            "12:30:45",
            "2001-12-14",
            "'single'",
            "\"dq \\u00e9\"",
            "\"\\t\"",
            "'it''s'",
            "a b",
            "a: b",
            "- a",
            "#x",
            "a #c",
            "[1, 2]",
            "{a: 1}",
            "[]",
            "{}",
            "&x 1",
            "*x",
            "!!str 1",
            "!!int \"3\"",
            "|\n  text\n",
            ">-\n  folded\n  line\n",
            "\"multi\n  line\"",
            "9223372036854775808",
            "-9223372036854775809",
            "1e400",
            "0.1",
            "@at",
            "`tick",
        ])
        .prop_map(String::from),
        "[a-z0-9 .:-]{0,6}",
    ];
    let key = prop::sample::select(vec![
        "a", "b", "yes", "1", "on", "null", "~", "\"q\"", "'k'", "a b", "x.y", "<<", "? c",
    ]);
    (
        prop::collection::vec((key, scalar.clone(), 0..4usize), 1..6),
        prop::sample::select(vec!["", "# head\n", "%YAML 1.1\n---\n", "---\n"]),
    )
        .prop_map(|(entries, head)| {
            let mut out = head.to_string();
            for (k, v, shape) in entries {
                match shape {
                    0 => out.push_str(&format!("{k}: {v}\n")),
                    1 => out.push_str(&format!("{k}:\n  - {v}\n  - {v}\n")),
                    2 => out.push_str(&format!("{k}:\n  n: {v}\n")),
                    _ => out.push_str(&format!("{k}: [{v}, {{m: {v}}}]\n")),
                }
            }
            out
        })
}

/// JSON values equal as Kubernetes sees them: numbers by value.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || (x.as_f64().is_some() && x.as_f64() == y.as_f64())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_json(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

const YAML_QUOTED_INDENT: &str = "a quoted scalar whose continuation lines are not indented past its parent: YAML requires the indentation and dovetail refuses the file; go-yaml (libyaml) reads it";

const YAML_FLOW_DASH: &str = "a `-` before a flow indicator in a flow collection (`[-, x]`): not a plain scalar in YAML 1.2, which dovetail follows and refuses; libyaml reads the string \"-\"";

const YAML_MERGE_TWICE: &str = "a key that two maps of a `<<` merge both give: YAML's merge keys let the first win and dovetail reads it so; go-yaml's strict mode calls it a key set twice";

const YAML_FLOW_COLON: &str = "a `:` not followed by a blank inside a flow collection (`[:0]`, `[a:, x]`, `{m: a:}`): dovetail reads it as YAML 1.2 does (a plain scalar, or a key indicator before `,` `]` `}`); libyaml reads text, or refuses";

/// Whether a line has a `:` not followed by a blank between `[` and `]`.
fn flow_colon(doc: &str) -> bool {
    doc.lines().any(|line| {
        let (Some(open), Some(close)) = (line.find('['), line.rfind(']')) else {
            return false;
        };
        let flow = &line[open..=close.max(open)];
        flow.match_indices(':')
            .any(|(i, _)| !flow[i + 1..].starts_with(' '))
    })
}

/// dovetail's YAML reader against sigs.k8s.io/yaml's strict conversion
/// (the API server's and kubectl's reader, which refuses a key twice as
/// dovetail does).
#[test]
fn yaml_reads_as_sigs_k8s_io_yaml() {
    let seeds: Vec<String> = [
        "a: 1\n",
        "a: yes\n",
        "a: 0o17\n",
        "a: 017\n",
        "a: 12:30\n",
        "a: 1_000\n",
        "a: .inf\n",
        "a: ~\n",
        "yes: 1\n",
        "1: a\n",
        "a: 1\na: 2\n",
        "a: &x 1\nb: *x\n",
        "a: !!str 1\n",
        "a: [1, {b: 2}]\n",
        "a: |\n  x\n",
        "a: 9223372036854775808\n",
        "a: 1e400\n",
        "<<: {a: 1}\nb: 2\n",
        "a: \"\\u00e9\"\n",
        "? a\n: 1\n",
        "null: 1\n",
        "~: 1\n",
        "a: b:\n",
        "a: -:\n",
        "a: x: y\n",
        "a: -: y\n",
        "a: --:\n",
        "a: ?:\n",
        "a: -b:\n",
    ]
    .map(String::from)
    .to_vec();
    compare("sigs.k8s.io/yaml", &seeds, yaml_documents(), |o, s| {
        let theirs = o.ask(json!({"op": "yaml", "in": s}));
        let parsed =
            dovetail::config::yaml::parse_documents("t.yaml", s.as_bytes(), &Default::default());
        let errors: Vec<String> = parsed
            .diagnostics
            .iter()
            .filter(|d| d.severity == dovetail::diag::Severity::Error)
            .map(|d| format!("{}: {}", d.code, d.message))
            .collect();
        let ours = if errors.is_empty() {
            Ok(parsed
                .docs
                .first()
                .map(|d| d.root.to_json())
                .unwrap_or(Value::Null))
        } else {
            Err(errors.join("; "))
        };
        match (ours, theirs) {
            (Ok(a), Ok(t)) if t["strictErr"] == "" && same_json(&a, &t["json"]) => Verdict::Agree,
            (Err(_), Ok(t)) if t["strictErr"] != "" => Verdict::Agree,
            (Err(_), Err(_)) => Verdict::Agree,
            (Err(e), Ok(_)) if e.contains("multiline quoted scalar") => {
                Verdict::Kept(YAML_QUOTED_INDENT)
            }
            _ if flow_colon(s) => Verdict::Kept(YAML_FLOW_COLON),
            (Ok(_), Ok(t))
                if s.contains("<<")
                    && t["strictErr"]
                        .as_str()
                        .is_some_and(|e| e.contains("already set in map")) =>
            {
                Verdict::Kept(YAML_MERGE_TWICE)
            }
            (Err(e), Ok(_)) if e.contains("plain scalar cannot start with '-' followed by") => {
                Verdict::Kept(YAML_FLOW_DASH)
            }
            (ours, theirs) => Verdict::Differ(format!("dovetail {ours:?}, Go {theirs:?}")),
        }
    });
}

// ---------------------------------------------------------------------------
// Patches

fn small_values() -> impl Strategy<Value = Value> {
    prop::sample::select(vec![
        json!(null),
        json!("x"),
        json!(1),
        json!(true),
        json!({}),
        json!([]),
        json!({"a": "y"}),
        json!(["x"]),
        json!({"name": "b", "image": "i2"}),
        json!([{"name": "a", "image": "i3"}]),
    ])
}

/// A pod with the lists strategic merge patches treat differently.
fn pod_doc() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "x", "b": "y"}, "finalizers": ["f1", "f2"]},
        "spec": {
            "containers": [
                {"name": "a", "image": "i1", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                 "env": [{"name": "E", "value": "1"}]},
                {"name": "b", "image": "i2"}
            ],
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "volumes": [{"name": "v", "emptyDir": {}}],
            "nodeSelector": {"n": "1"}
        }
    })
}

#[test]
fn json_patches_apply_as_the_api_server_applies_them() {
    let paths = prop::sample::select(vec![
        "",
        "/",
        "/metadata/labels/a",
        "/metadata/labels/new",
        "/metadata/labels",
        "/metadata/finalizers/0",
        "/metadata/finalizers/2",
        "/metadata/finalizers/-",
        "/metadata/finalizers/01",
        "/metadata/finalizers/-1",
        "/spec/containers/1/image",
        "/spec/containers/5",
        "/spec/missing/x",
        "/metadata/a~1b",
        "/metadata/a~0b",
        "/metadata/~2",
        "metadata",
        "/spec/nodeSelector/n",
    ]);
    let op = (
        prop::sample::select(vec![
            "add", "remove", "replace", "move", "copy", "test", "bad",
        ]),
        paths.clone(),
        paths,
        small_values(),
        0..4u8,
    )
        .prop_map(|(op, path, from, value, drop)| {
            let mut o = json!({"op": op, "path": path, "from": from, "value": value});
            // Leave out a member now and then: a missing `value` or `from`.
            match drop {
                1 => o.as_object_mut().map(|m| m.remove("value")),
                2 => o.as_object_mut().map(|m| m.remove("from")),
                _ => None,
            };
            o
        });
    let seeds: Vec<Value> = vec![
        json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "f3"}]),
        json!([{"op": "test", "path": "/metadata/labels/a", "value": "x"}, {"op": "remove", "path": "/metadata/labels/a"}]),
        json!([{"op": "remove", "path": "/metadata/labels/zz"}]),
        json!([{"op": "replace", "path": "/metadata/labels/zz", "value": "1"}]),
        json!([{"op": "move", "path": "/metadata/labels/c", "from": "/metadata/labels/a"}]),
        json!([{"op": "copy", "path": "/spec/containers/-", "from": "/spec/containers/0"}]),
        json!([{"op": "add", "path": "/spec/containers/0", "value": {}}]),
        json!([{"op": "add", "path": "", "value": {}}]),
        json!([]),
        json!({}),
    ];
    compare(
        "json patch (evanphx/json-patch v4)",
        &seeds,
        prop_oneof![
            prop::collection::vec(op, 0..4).prop_map(Value::Array),
            Just(json!([]))
        ],
        |o, p| {
            let doc = pod_doc();
            let theirs = o.ask(json!({"op": "jsonpatch", "doc": doc, "patch": p}));
            let ours = patch::apply(PatchType::Json, &doc, p.to_string().as_bytes())
                .map_err(|e| e.to_string());
            let at_root = p
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["path"] == "" || o["from"] == "");
            // `~` other than the escapes `~0` and `~1`.
            let odd_escape = p.as_array().into_iter().flatten().any(|o| {
                [&o["path"], &o["from"]]
                    .iter()
                    .filter_map(|v| v.as_str())
                    .any(|path| {
                        path.match_indices('~')
                            .any(|(i, _)| !matches!(path.as_bytes().get(i + 1), Some(b'0' | b'1')))
                    })
            });
            // An index RFC 6901 does not have: a leading zero or a sign.
            let odd_index = p.as_array().into_iter().flatten().any(|o| {
                [&o["path"], &o["from"]]
                    .iter()
                    .filter_map(|v| v.as_str())
                    .any(|path| {
                        path.split('/').any(|seg| {
                            let digits = seg.strip_prefix('-').unwrap_or(seg);
                            !digits.is_empty()
                                && digits.bytes().all(|b| b.is_ascii_digit())
                                && (seg.starts_with('-') || (seg.len() > 1 && seg.starts_with('0')))
                        })
                    })
            });
            match verdict(ours.clone(), theirs.clone()) {
                Verdict::Differ(_)
                    if theirs.is_ok()
                        && ours.as_ref().is_err_and(|e| e.contains("path is invalid")) =>
                {
                    Verdict::Kept(MISSING_AS_NULL)
                }
                Verdict::Differ(_) if at_root => Verdict::Kept(ROOT_PATH),
                Verdict::Differ(_) if odd_index => Verdict::Kept(ODD_INDEX),
                Verdict::Differ(_) if odd_escape => Verdict::Kept(ODD_ESCAPE),
                Verdict::Differ(_)
                    if ours
                        .as_ref()
                        .is_err_and(|e| e.contains("missing field `value`")) =>
                {
                    Verdict::Kept(NO_VALUE)
                }
                v => v,
            }
        },
    );
}

const MISSING_AS_NULL: &str = "an operation on a member the object lacks (`replace` it, `test` it against null, `copy` or `move` from it): the API server's json-patch (evanphx v4) reads the missing member as null and carries on; RFC 6902 and dovetail's served API refuse the patch";
const NO_VALUE: &str = "an `add`, `replace` or `test` without `value`: evanphx v4 reads the value as null, dovetail refuses the patch as RFC 6902 requires";
const ODD_INDEX: &str = "an array index with a leading zero or a sign (`/01`, `/-1`): not an index in RFC 6901, and dovetail refuses; evanphx v4 reads 1, and counts -1 from the end";
const ODD_ESCAPE: &str = "a pointer with `~` not followed by 0 or 1 (`/~2`): RFC 6901 forbids it and dovetail refuses the patch; evanphx v4 reads the `~` literally";
const ROOT_PATH: &str = "an operation on the whole document (path or from \"\"): RFC 6902 and dovetail apply it, evanphx v4 refuses or misreads it";

fn merge_patches() -> impl Strategy<Value = Value> {
    let leaf = small_values();
    let key = prop::sample::select(vec![
        "metadata",
        "labels",
        "a",
        "b",
        "finalizers",
        "spec",
        "containers",
        "tolerations",
        "nodeSelector",
        "n",
        "name",
        "image",
        "$patch",
        "$retainKeys",
        "$deleteFromPrimitiveList/finalizers",
        "$setElementOrder/containers",
    ]);
    leaf.prop_recursive(3, 24, 4, move |inner| {
        prop_oneof![
            prop::collection::btree_map(key.clone(), inner.clone(), 0..4).prop_map(|m| {
                Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
            prop::collection::vec(inner, 0..3).prop_map(Value::Array),
        ]
    })
}

#[test]
fn merge_patches_apply_as_the_api_server_applies_them() {
    let seeds: Vec<Value> = vec![
        json!({"metadata": {"labels": {"a": null, "c": "z"}}}),
        json!({"metadata": {"finalizers": null}}),
        json!({"spec": {"containers": [{"name": "c"}]}}),
        json!(null),
        json!([]),
        json!("x"),
        json!({"metadata": "x"}),
        // Found by a long run: what replaces an object keeps its nulls.
        json!({"metadata": [{"metadata": null}]}),
        json!({"spec": {"nodeSelector": [{"a": null}], "new": [{"a": null}]}}),
    ];
    compare(
        "merge patch (evanphx/json-patch v4)",
        &seeds,
        merge_patches(),
        |o, p| {
            let doc = pod_doc();
            let theirs = o.ask(json!({"op": "mergepatch", "doc": doc, "patch": p}));
            let ours = patch::apply(PatchType::Merge, &doc, p.to_string().as_bytes())
                .map_err(|e| e.to_string());
            verdict(ours, theirs)
        },
    );
}

const STRATEGIC_HINTS: &str = "strategic merge: the client-side directives $retainKeys, $setElementOrder and $deleteFromPrimitiveList, which kubectl apply writes and the served API applies loosely (removal only) or ignores, without strategicpatch's checks";

const STRATEGIC_PATH: &str = "strategic merge: a list named like one with a merge key, where the Pod has no such field (a `containers` at the top): dovetail's served API looks merge keys up by field name, strategicpatch by the kind's schema";

/// Whether a patch has a merge-keyed list name (or `finalizers`) anywhere
/// but where a Pod declares it.
fn misplaced(v: &Value, path: &mut Vec<String>) -> bool {
    let expected: &[(&str, &[&str])] = &[
        ("containers", &["spec"]),
        ("initContainers", &["spec"]),
        ("volumes", &["spec"]),
        ("env", &["spec", "containers"]),
        ("ports", &["spec", "containers"]),
        ("finalizers", &["metadata"]),
        ("ownerReferences", &["metadata"]),
        ("conditions", &["status"]),
    ];
    match v {
        Value::Object(m) => m.iter().any(|(k, child)| {
            let wrong = expected
                .iter()
                .any(|(name, at)| k == name && path.as_slice() != *at);
            path.push(k.clone());
            let below = misplaced(child, path);
            path.pop();
            wrong || below
        }),
        Value::Array(items) => items.iter().any(|i| misplaced(i, path)),
        _ => false,
    }
}

/// Strategic merge patches of a pod, each directive where kubectl and
/// controllers put it.
fn strategic_patches() -> impl Strategy<Value = Value> {
    let maybe = |v: Value| prop_oneof![Just(None), Just(Some(v))];
    let scalar = prop::sample::select(vec![json!("x"), json!("y"), json!(null)]);
    let labels = prop::collection::btree_map(
        prop::sample::select(vec!["a", "b", "c"]),
        scalar.clone(),
        0..3,
    );
    let finalizers = prop::collection::vec(prop::sample::select(vec!["f1", "f2", "f3"]), 0..3);
    let element = (
        prop::sample::select(vec![json!("a"), json!("b"), json!("c"), Value::Null]),
        prop::sample::select(vec![json!("i1"), json!("i9"), json!(null), json!("-")]),
        prop::sample::select(vec![
            json!("-"),
            json!("delete"),
            json!("replace"),
            json!("merge"),
        ]),
        prop::sample::select(vec![
            json!("-"),
            json!([{"containerPort": 81}]),
            json!([{"containerPort": 80, "protocol": "UDP"}]),
        ]),
        prop::sample::select(vec![
            json!("-"),
            json!([{"name": "E", "$patch": "delete"}]),
            json!([{"name": "F", "value": "2"}]),
        ]),
    )
        .prop_map(|(name, image, directive, ports, env)| {
            let mut e = serde_json::Map::new();
            for (k, v) in [
                ("name", name),
                ("image", image),
                ("$patch", directive),
                ("ports", ports),
                ("env", env),
            ] {
                if v != "-" && !(k == "name" && v.is_null()) {
                    e.insert(k.to_string(), v);
                }
            }
            Value::Object(e)
        });
    (
        maybe(json!(null)).prop_flat_map(move |_| labels.clone()),
        finalizers,
        0..4u8,
        prop::collection::vec(element, 0..3),
        prop::sample::select(vec![
            json!("-"),
            json!([{"key": "t", "operator": "Exists"}]),
            json!(null),
        ]),
        prop::sample::select(vec![
            json!("-"),
            json!({"m": "2"}),
            json!({"$patch": "replace", "m": "2"}),
            json!({"$patch": "delete"}),
            json!({"n": null}),
        ]),
        prop::sample::select(vec![
            json!("-"),
            json!([{"name": "w", "emptyDir": {}}]),
            json!([{"name": "v", "$patch": "delete"}]),
        ]),
    )
        .prop_map(
            |(labels, finalizers, meta_shape, containers, tolerations, node_selector, volumes)| {
                let mut metadata = serde_json::Map::new();
                if !labels.is_empty() {
                    metadata.insert("labels".into(), json!(labels));
                }
                match meta_shape {
                    1 => drop(metadata.insert("finalizers".into(), json!(finalizers))),
                    2 => drop(metadata.insert(
                        "$deleteFromPrimitiveList/finalizers".into(),
                        json!(finalizers),
                    )),
                    3 => drop(metadata.insert("finalizers".into(), Value::Null)),
                    _ => {}
                }
                let mut spec = serde_json::Map::new();
                if !containers.is_empty() {
                    spec.insert("containers".into(), Value::Array(containers));
                }
                for (k, v) in [
                    ("tolerations", tolerations),
                    ("nodeSelector", node_selector),
                    ("volumes", volumes),
                ] {
                    if v != "-" {
                        spec.insert(k.into(), v);
                    }
                }
                json!({"metadata": metadata, "spec": spec})
            },
        )
}

#[test]
fn strategic_merge_patches_apply_as_strategicpatch_does() {
    let seeds: Vec<Value> = vec![
        json!({"metadata": {"labels": {"a": null}}}),
        json!({"metadata": {"finalizers": ["f3"]}}),
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"]}}),
        json!({"spec": {"containers": [{"name": "b", "image": "i9"}]}}),
        json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}),
        json!({"spec": {"containers": [{"name": "c", "image": "i4"}]}}),
        json!({"spec": {"tolerations": [{"key": "t", "operator": "Exists"}]}}),
        json!({"spec": {"nodeSelector": {"$patch": "replace", "m": "2"}}}),
        json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 81}]}]}}),
        json!({"spec": {"containers": [{"name": "a", "env": [{"name": "E", "$patch": "delete"}]}]}}),
        json!({"spec": {"volumes": [{"name": "w", "emptyDir": {}}]}}),
        json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": [{"name": "a", "image": "i5"}]}}),
        json!({"spec": {"containers": [{"image": "no-name"}]}}),
        // Lists longer than Go's insertion-sort block of 20, the patch's
        // names in another order than the target's.
        json!({"spec": {"containers": (0..25).rev().map(|i| json!({"name": format!("c{i:02}")})).chain([json!({"name": "a", "image": "i7"})]).collect::<Vec<_>>()}}),
        json!({"metadata": {"finalizers": (0..30).map(|i| format!("f{}", (i * 7) % 30)).collect::<Vec<_>>()}}),
    ];
    compare(
        "strategicpatch (core/v1 Pod)",
        &seeds,
        prop_oneof![strategic_patches(), merge_patches()],
        |o, p| {
            let doc = pod_doc();
            let theirs = o.ask(json!({"op": "strategic", "doc": doc, "patch": p, "kind": "Pod"}));
            let ours = patch::apply(PatchType::Strategic, &doc, p.to_string().as_bytes())
                .map_err(|e| e.to_string());
            let text = p.to_string();
            let hints = [
                "$retainKeys",
                "$setElementOrder/",
                "$deleteFromPrimitiveList/",
            ];
            match verdict(ours.clone(), theirs.clone()) {
                Verdict::Differ(_) if hints.iter().any(|h| text.contains(h)) => {
                    Verdict::Kept(STRATEGIC_HINTS)
                }
                Verdict::Differ(_) if misplaced(p, &mut Vec::new()) => {
                    Verdict::Kept(STRATEGIC_PATH)
                }
                v => v,
            }
        },
    );
}
