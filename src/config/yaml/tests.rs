use super::*;
use serde_json::json;

fn parse(text: &str) -> ParsedFile {
    parse_documents("f.yaml", text.as_bytes(), &Limits::default())
}

fn one(text: &str) -> Node {
    let parsed = parse(text);
    assert!(parsed.diagnostics.is_empty(), "{:?}", parsed.diagnostics);
    assert_eq!(parsed.docs.len(), 1);
    parsed.docs.into_iter().next().unwrap().root
}

fn pos(line: u32, column: u32) -> Pos {
    Pos { line, column }
}

#[test]
fn positions_of_keys_and_values_in_nested_maps_and_sequences() {
    let root = one(
        "apiVersion: v1\nspec:\n  limits:\n    cpu: 100\n  items:\n    - a\n    - name: b\n      x: [1, {z: 2}]\n",
    );
    assert_eq!(root.pos, pos(1, 1));
    assert_eq!(root.locate(&JsonPath::parse("spec")), pos(2, 1));
    assert_eq!(root.locate(&JsonPath::parse("spec.limits")), pos(3, 3));
    assert_eq!(
        root.locate_value(&JsonPath::parse("spec.limits")),
        pos(4, 5)
    );
    assert_eq!(root.locate(&JsonPath::parse("spec.limits.cpu")), pos(4, 5));
    assert_eq!(
        root.locate_value(&JsonPath::parse("spec.limits.cpu")),
        pos(4, 10)
    );
    assert_eq!(root.locate(&JsonPath::parse("spec.items[0]")), pos(6, 7));
    assert_eq!(root.locate(&JsonPath::parse("spec.items[1]")), pos(7, 7));
    assert_eq!(root.locate(&JsonPath::parse("spec.items[1].x")), pos(8, 7));
    assert_eq!(
        root.locate(&JsonPath::parse("spec.items[1].x[1].z")),
        pos(8, 15)
    );
    assert_eq!(
        root.locate_value(&JsonPath::parse("spec.items[1].x[1].z")),
        pos(8, 18)
    );
    assert_eq!(
        root.locate_value(&JsonPath::parse("spec.items[1].x[0]")),
        pos(8, 11)
    );
}

#[test]
fn locate_partial_paths_stop_at_the_deepest_existing_node() {
    let root = one("spec:\n  limits:\n    cpu: 1\n  list: [a]\n");
    assert_eq!(
        root.locate(&JsonPath::parse("spec.limits.memory")),
        pos(2, 3)
    );
    assert_eq!(root.locate(&JsonPath::parse("spec.list[5].x")), pos(4, 3));
    assert_eq!(root.locate(&JsonPath::parse("nope.x")), pos(1, 1));
    assert_eq!(
        root.locate(&JsonPath::parse("spec.limits.cpu.deeper")),
        pos(3, 5)
    );
    assert_eq!(root.locate(&JsonPath::root()), pos(1, 1));
    assert_eq!(
        root.get("spec")
            .and_then(|s| s.get("limits"))
            .map(|n| n.pos),
        Some(pos(3, 5))
    );
    assert!(root.get("missing").is_none());
}

#[test]
fn scalars_resolve_as_kubernetes_reads_them() {
    let root = one(concat!(
        "a: ~\nb: null\nc:\nd: true\ne: yes\nf: Off\ng: 42\nh: -7\ni: 0x1F\nj: 0o17\nk: 017\n",
        "l: 0b101\nm: 1_000\nnn: 1.5\no: 1e3\np: .5\nq: \"42\"\nr: '1.5'\ns: 123456789012345678901234567890\n",
        "t: 18446744073709551615\nu: 2024-01-01\nv: !!str 12\nw: !!int \"12\"\nx: |\n  text\nyy: 1e999\nz: -0x10\n",
        "aa: 08\nab: +5\nac: 1.2.3\n"
    ));
    let json = root.to_json();
    assert_eq!(json["a"], json!(null));
    assert_eq!(json["b"], json!(null));
    assert_eq!(json["c"], json!(null));
    assert_eq!(json["d"], json!(true));
    assert_eq!(json["e"], json!(true));
    assert_eq!(json["f"], json!(false));
    assert_eq!(json["g"], json!(42));
    assert_eq!(json["h"], json!(-7));
    assert_eq!(json["i"], json!(31));
    assert_eq!(json["j"], json!(15));
    assert_eq!(json["k"], json!(15));
    assert_eq!(json["l"], json!(5));
    assert_eq!(json["m"], json!(1000));
    assert_eq!(json["nn"], json!(1.5));
    assert_eq!(json["o"], json!(1000.0));
    assert_eq!(json["p"], json!(0.5));
    assert_eq!(json["q"], json!("42"));
    assert_eq!(json["r"], json!("1.5"));
    assert_eq!(json["s"], json!(1.2345678901234568e29));
    assert_eq!(json["t"], json!(u64::MAX));
    assert_eq!(json["u"], json!("2024-01-01"));
    assert_eq!(json["v"], json!("12"));
    assert_eq!(json["w"], json!(12));
    assert_eq!(json["x"], json!("text\n"));
    assert_eq!(json["yy"], json!("1e999"));
    assert_eq!(json["z"], json!(-16));
    assert_eq!(json["aa"], json!(8.0));
    assert_eq!(json["ab"], json!(5));
    assert_eq!(json["ac"], json!("1.2.3"));
}

#[test]
fn non_finite_floats_are_reported_and_kept_as_strings() {
    let parsed = parse("a: .inf\nb: -.Inf\nc: .NaN\n");
    assert_eq!(parsed.diagnostics.len(), 3, "{:?}", parsed.diagnostics);
    assert!(
        parsed.diagnostics[0]
            .message
            .contains("not a finite number")
    );
    assert_eq!(
        (parsed.diagnostics[1].line, parsed.diagnostics[1].column),
        (2, 4)
    );
    assert_eq!(parsed.docs[0].root.to_json()["c"], json!(".NaN"));
}

#[test]
fn yaml11_booleans_apply_to_keys_as_in_kubernetes() {
    let root = one("y: 1\nn: 2\n");
    assert_eq!(root.to_json(), json!({"true": 1, "false": 2}));
}

#[test]
fn float_keys_are_written_as_go_yaml_writes_them() {
    for (f, text) in [
        (0.0, "0"),
        (1.0, "1"),
        (1.5, "1.5"),
        (0.1, "0.1"),
        (123456.0, "123456"),
        (1234567.0, "1.234567e+06"),
        (123456789.0, "1.2345679e+08"),
        (1e21, "1e+21"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (-2.5, "-2.5"),
        (f64::INFINITY, ".inf"),
        (f64::NEG_INFINITY, "-.inf"),
        (f64::NAN, ".nan"),
        (1e300, ".inf"),
    ] {
        assert_eq!(go_float_key(f), text, "{f}");
    }
}

#[test]
fn non_string_keys_become_text_and_null_keys_are_errors() {
    let root = one("yes: 1\n0x10: 2\n1.5: 3\n");
    assert_eq!(root.to_json(), json!({"true": 1, "16": 2, "1.5": 3}));
    let parsed = parse("~: 1\n[a]: 2\nok: 3\n");
    assert_eq!(parsed.diagnostics.len(), 2, "{:?}", parsed.diagnostics);
    assert!(
        parsed
            .diagnostics
            .iter()
            .all(|d| d.code == codes::INVALID_KEY)
    );
    assert_eq!(parsed.docs[0].root.to_json(), json!({"ok": 3}));
}

#[test]
fn duplicate_keys_name_the_first_line() {
    let parsed = parse("a: 1\nb:\n  c: 1\n  c: 2\na: 3\n");
    let d: Vec<_> = parsed
        .diagnostics
        .iter()
        .map(|d| (d.line, d.column, d.message.as_str()))
        .collect();
    assert_eq!(
        d,
        vec![
            (4, 3, "duplicate key `c` (first defined at line 3)"),
            (5, 1, "duplicate key `a` (first defined at line 1)"),
        ]
    );
    assert_eq!(
        parsed.docs[0].root.to_json(),
        json!({"a": 3, "b": {"c": 2}})
    );
}

#[test]
fn duplicate_keys_in_large_maps_use_the_index() {
    let mut text: String = (0..100).map(|i| format!("k{i}: {i}\n")).collect();
    text.push_str("k7: again\n");
    let parsed = parse(&text);
    assert_eq!(parsed.diagnostics.len(), 1);
    assert_eq!(parsed.diagnostics[0].line, 101);
    assert!(parsed.diagnostics[0].message.contains("line 8"));
}

#[test]
fn multi_document_files_keep_indexes_and_empty_documents() {
    let parsed = parse("# header\na: 1\n---\n---\n# only a comment\n---\nb: 2\n");
    assert!(parsed.diagnostics.is_empty());
    let roots: Vec<_> = parsed
        .docs
        .iter()
        .map(|d| (d.index, d.root.to_json()))
        .collect();
    assert_eq!(
        roots,
        vec![
            (0, json!({"a": 1})),
            (1, json!(null)),
            (2, json!(null)),
            (3, json!({"b": 2}))
        ]
    );
    assert_eq!(parsed.docs[3].root.pos, pos(7, 1));
}

#[test]
fn comment_only_and_empty_files_have_no_documents() {
    for text in [
        "",
        "\n\n",
        "# just a comment\n  # another\n",
        "\u{feff}# bom\n",
    ] {
        let parsed = parse(text);
        assert!(parsed.docs.is_empty(), "{text:?}: {:?}", parsed.docs);
        assert!(parsed.diagnostics.is_empty());
    }
}

#[test]
fn syntax_error_drops_only_its_document() {
    let parsed = parse("a: 1\n---\nb: [1, 2\nc: d\n---\ne: 5\n");
    assert_eq!(parsed.diagnostics.len(), 1, "{:?}", parsed.diagnostics);
    let d = &parsed.diagnostics[0];
    assert_eq!(d.code, codes::SYNTAX);
    assert!(d.line >= 3, "{d}");
    let roots: Vec<_> = parsed
        .docs
        .iter()
        .map(|d| (d.index, d.root.to_json()))
        .collect();
    assert_eq!(roots, vec![(0, json!({"a": 1})), (2, json!({"e": 5}))]);
}

#[test]
fn aliases_and_merge_keys_are_expanded() {
    let root = one(concat!(
        "base: &base {cpu: 1, memory: 2}\n",
        "other: &other {memory: 3, disk: 4}\n",
        "copy: *base\n",
        "merged:\n  <<: [*base, *other]\n  cpu: 9\n",
    ));
    let json = root.to_json();
    assert_eq!(json["copy"], json!({"cpu": 1, "memory": 2}));
    assert_eq!(json["merged"], json!({"cpu": 9, "memory": 2, "disk": 4}));
    assert_eq!(root.locate_value(&JsonPath::parse("copy")), pos(3, 7));
    // Inside the copy, positions are those of the definition.
    assert_eq!(root.locate(&JsonPath::parse("copy.memory")), pos(1, 22));
    let keys: Vec<_> = match &root.get("merged").unwrap().value {
        Value::Map(e) => e.iter().map(|(k, _)| k.name.as_str()).collect(),
        _ => vec![],
    };
    assert_eq!(keys, vec!["memory", "disk", "cpu"]);
}

#[test]
fn anchored_keys_can_be_aliased() {
    let root = one("&k name: first\nother: *k\n");
    assert_eq!(root.to_json(), json!({"name": "first", "other": "name"}));
    let root = one("a: &k x\n*k : 1\n");
    assert_eq!(root.to_json(), json!({"a": "x", "x": 1}));
}

#[test]
fn recursive_alias_in_key_position_is_one_error() {
    let parsed = parse("a: &a {*a : 1, b: 2}\n");
    assert_eq!(parsed.diagnostics.len(), 1, "{:?}", parsed.diagnostics);
    assert!(parsed.diagnostics[0].message.contains("recursive alias"));
    assert_eq!(parsed.docs[0].root.to_json(), json!({"a": {"b": 2}}));
}

#[test]
fn quoted_merge_key_is_an_ordinary_key() {
    let root = one("\"<<\": {a: 1}\n");
    assert_eq!(root.to_json(), json!({"<<": {"a": 1}}));
}

#[test]
fn binary_files_are_not_text() {
    let parsed = parse_documents("b.yaml", b"a: 1\n\x00\x01\x02", &Limits::default());
    assert!(parsed.docs.is_empty());
    assert_eq!(parsed.diagnostics.len(), 1);
    assert_eq!(parsed.diagnostics[0].code, codes::NOT_TEXT);
    assert!(parsed.diagnostics[0].message.starts_with("not a text file"));
    assert_eq!(parsed.diagnostics[0].file, "b.yaml");
}

#[test]
fn invalid_utf8_names_offset_and_line() {
    let parsed = parse_documents("u.yaml", b"a: 1\nb: \xff\xfe\n", &Limits::default());
    assert_eq!(parsed.diagnostics.len(), 1);
    let d = &parsed.diagnostics[0];
    assert_eq!(d.code, codes::INVALID_UTF8);
    assert_eq!(d.message, "invalid UTF-8 at byte offset 8 (line 2)");
    assert_eq!((d.line, d.column), (2, 4));
}

#[test]
fn oversized_files_are_not_parsed() {
    let limits = Limits {
        max_file_bytes: 10,
        ..Limits::default()
    };
    let parsed = parse_documents("big.yaml", b"a: 12345678901234\n", &limits);
    assert!(parsed.docs.is_empty());
    assert_eq!(parsed.diagnostics[0].code, codes::FILE_TOO_LARGE);
    assert!(
        parsed.diagnostics[0]
            .hint
            .as_deref()
            .unwrap()
            .contains("etcd")
    );
}

#[test]
fn a_50_mb_file_is_rejected_without_parsing() {
    let big = "a: b\n".repeat(10 * 1024 * 1024);
    let parsed = parse_documents("big.yaml", big.as_bytes(), &Limits::default());
    assert!(parsed.docs.is_empty());
    assert_eq!(parsed.diagnostics.len(), 1);
    assert!(parsed.diagnostics[0].message.contains("52428800 bytes"));
}

#[test]
fn deep_nesting_is_a_limit_error() {
    for text in [
        "[".repeat(100_000),
        "{a: ".repeat(100_000),
        (0..200)
            .map(|i| format!("{}- \n", "  ".repeat(i)))
            .collect(),
        (0..200)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect(),
    ] {
        let parsed = parse(&text);
        assert!(parsed.docs.is_empty());
        assert_eq!(parsed.diagnostics.len(), 1, "{:?}", parsed.diagnostics);
        assert_eq!(parsed.diagnostics[0].code, codes::LIMIT);
        assert!(
            parsed.diagnostics[0]
                .message
                .contains("nesting deeper than 64")
        );
    }
    // 64 levels are fine.
    let ok = format!("{}{}", "[".repeat(64), "]".repeat(64));
    assert!(parse(&ok).diagnostics.is_empty());
}

#[test]
fn nesting_through_aliases_is_bounded() {
    let mut text = format!("a0: &a0 {}1{}\n", "[".repeat(60), "]".repeat(60));
    for i in 1..5 {
        text.push_str(&format!("a{i}: &a{i} [[[[[[[[[[*a{}]]]]]]]]]]\n", i - 1));
    }
    let parsed = parse(&text);
    assert_eq!(parsed.diagnostics.len(), 1, "{:?}", parsed.diagnostics);
    assert!(parsed.diagnostics[0].message.contains("nesting deeper"));
}

#[test]
fn billion_laughs_is_stopped() {
    let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    let start = std::time::Instant::now();
    let parsed = parse(&text);
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    assert!(parsed.docs.is_empty());
    assert_eq!(parsed.diagnostics.len(), 1);
    assert_eq!(parsed.diagnostics[0].code, codes::LIMIT);
    assert!(parsed.diagnostics[0].message.contains("billion laughs"));
}

#[test]
fn large_scalar_aliased_many_times_is_stopped_by_bytes() {
    let mut text = format!("a: &a \"{}\"\nb: [", "x".repeat(1024 * 1024));
    text.push_str(&vec!["*a"; 20].join(", "));
    text.push_str("]\n");
    let parsed = parse(&text);
    assert_eq!(parsed.diagnostics.len(), 1);
    assert_eq!(parsed.diagnostics[0].code, codes::LIMIT);
}

#[test]
fn recursive_alias_is_an_error_not_a_hang() {
    let parsed = parse("a: &a [1, *a]\n");
    assert_eq!(parsed.diagnostics.len(), 1, "{:?}", parsed.diagnostics);
}

#[test]
fn too_many_documents_is_a_limit_error() {
    let limits = Limits {
        max_documents: 5,
        ..Limits::default()
    };
    let text = "a: 1\n---\n".repeat(10);
    let parsed = parse_documents("many.yaml", text.as_bytes(), &limits);
    assert_eq!(parsed.docs.len(), 5);
    assert_eq!(parsed.diagnostics.len(), 1);
    assert!(
        parsed.diagnostics[0]
            .message
            .contains("more than 5 documents")
    );
    // The default limit with many tiny documents.
    let text = "---\n".repeat(20_000);
    let parsed = parse(&text);
    assert_eq!(parsed.docs.len(), DEFAULT_MAX_DOCUMENTS);
    assert_eq!(parsed.diagnostics.len(), 1);
}

/// Parses with the general parser only.
fn slow(text: &str) -> ParsedFile {
    let mut out = ParsedFile::default();
    Builder::new("f.yaml", &Limits::default(), &mut out).run(text);
    out
}

/// Parses with the fast reader; `None` if it bails.
fn quick(text: &str) -> Option<ParsedFile> {
    let mut out = ParsedFile::default();
    let r = fast::run(
        text,
        &mut Builder::new("f.yaml", &Limits::default(), &mut out),
    );
    (r == fast::Fast::Done).then_some(out)
}

fn same_as_general_parser(text: &str) -> bool {
    match quick(text) {
        Some(fast) => {
            assert_eq!(
                fast,
                slow(text),
                "fast and general parsers differ on {text:?}"
            );
            true
        }
        None => false,
    }
}

const NODEPOOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default # the default\n  labels:\n    team: \"platform\"\n    'quoted key': x\nspec:\n  template:\n    spec:\n      nodeClassRef:\n        group: karpenter.k8s.aws\n        kind: EC2NodeClass\n        name: default\n      taints:\n        - key: example.com/special\n          value: \"true\"\n          effect: NoSchedule\n      requirements:\n      - key: karpenter.k8s.aws/instance-category\n        operator: In\n        values: [\"c\", m, 'r']\n        minValues: 2\n      - key: kubernetes.io/arch\n        operator: In\n        values: []\n  disruption:\n    consolidateAfter: 1m\n    budgets:\n      - nodes: 10%\n      - schedule: \"0 9 * * mon-fri\"\n        duration: 8h\n  limits: {}\n  weight: 10\n  empty:\n  list:\n    -\n    - a\n---\nkind: EC2NodeClass\r\nspec:\r\n  amiSelectorTerms:\r\n    - alias: al2023@latest\r\n---\n";

#[test]
fn fast_reader_handles_typical_configuration() {
    assert!(same_as_general_parser(NODEPOOL));
    let parsed = parse(NODEPOOL);
    assert_eq!(parsed.docs.len(), 3);
    assert_eq!(parsed.docs[2].root.value, Value::Null);
}

#[test]
fn fast_reader_matches_the_general_parser() {
    let accepted = [
        "a: 1\n",
        "- a\n- b\n",
        "a:\n- 1\n- 2\nb: 3\n",
        "a:\n  b:\n    c: d\n  e: f\n",
        "x\n",
        "'x'\n",
        "---\n",
        "a: 1\n---\n",
        "---\na: 1\n",
        "a:\n",
        "- \n",
        "-\n- - \n",
        "a: [x, 'y', \"z\"]\n",
        "a: [ ]\n",
        "a: b #c\n",
        "a#b: c\n",
        "a: -5\n",
        "a: b c d\n",
        "a: 1\na: 2\n",
        "k: v\n  \n# c\nj: w\n",
        "a:\n  - b: 1\n    c: 2\n  - d\n",
        "a: \"x\" # c\n",
        "é: ü\nb: ñ\n",
        "- a: 1\n  b:\n  - c\n",
        "a: {}\n",
        "-   x\n",
    ];
    let mut used = 0;
    for text in accepted {
        used += usize::from(same_as_general_parser(text));
    }
    assert!(
        used >= accepted.len() - 3,
        "fast reader accepted only {used}"
    );
    // Whether or not these are read fast, the result must not differ.
    for text in [
        // Found by the differential test against sigs.k8s.io/yaml: the
        // fast reader took `-:` for a scalar.
        "a: -:\n",
        "a: -: y\n",
        "a: -b:\n",
        "a:\n\n  b: 1\n",
        "a: # c\n  b: 1\n",
        "- a\n-\n",
        "a:\n-\n- b\n",
        "a: x\n b: y\n",
        "a:\n   - x\n   - y\n  b: z\n",
        "a:\n  - x\n - y\n",
        "- a\n  - b\n",
        "a: 1\n  \n\n",
        "---\n\n\n",
        "---\n---\n",
        "a:\n  b:\n c: 1\n",
        "- a: 1\n   b: 2\n",
        "a: 'x'y\n",
        "a: [a b]\n",
        "a: [a, ]\n",
        "a: [,]\n",
        "a: b\n- c\n",
        "- a\nb: c\n",
        "a: \"\"\n",
        "\"a\":\n  - 1\n",
        "'a': \n",
        "a :b\n",
        "a : b\n",
        "-a: b\n",
        "a: -\n",
        "a: 1 # x\nb:\n",
    ] {
        same_as_general_parser(text);
    }
    // Inputs outside the subset must bail, not mis-parse.
    for text in [
        "a: &x 1\nb: *x\n",
        "a: |\n  x\n",
        "a: \"x\\n\"\n",
        "a: b\n  c\n",
        "\ta: 1\n",
        "a: [1,\n 2]\n",
        "? a\n: b\n",
        "%YAML 1.2\n---\na: 1\n",
        "a: b: c\n",
        "<<: {a: 1}\n",
        "a: !!str 1\n",
        "a: 1\n...\n",
        "- - a\n",
        "---\n# c\n",
        "a: [b]c\n",
        "a: 'it''s'\n",
    ] {
        assert!(quick(text).is_none(), "fast reader should bail on {text:?}");
    }
}

#[test]
fn fast_reader_matches_on_generated_documents() {
    let keys = ["a", "b", "name", "'q'", "\"dq\"", "x.y/z", "a b", "n"];
    let values = [
        "", "1", "v", "\"s\"", "'t'", "[a, 'b']", "[]", "{}", "yes", "-1", "~", "0x1F", "# c",
        "x # c", "a b", "1.5", "\"\"", "''",
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut accepted = 0;
    for _ in 0..3000 {
        let mut text = String::new();
        for _ in 0..next(12) + 1 {
            let indent = "  ".repeat(next(4));
            match next(10) {
                0..=4 => text.push_str(&format!(
                    "{indent}{}: {}\n",
                    keys[next(keys.len())],
                    values[next(values.len())]
                )),
                5..=7 => text.push_str(&format!("{indent}- {}\n", values[next(values.len())])),
                8 => text.push_str(&format!(
                    "{indent}- {}: {}\n",
                    keys[next(keys.len())],
                    values[next(values.len())]
                )),
                _ => text.push_str(if next(2) == 0 { "---\n" } else { "\n" }),
            }
        }
        accepted += usize::from(same_as_general_parser(&text));
    }
    // The generator must exercise the fast reader, not just its bail-outs.
    assert!(
        accepted > 300,
        "only {accepted} generated inputs were read fast"
    );
}

#[test]
fn garbage_input_never_panics() {
    let samples: &[&[u8]] = &[
        b"\xef\xbb\xbf",
        b"---\n...\n...\n",
        b"&a",
        b"*a",
        b"? ? ?",
        b"- - - -",
        b"[}",
        b"{]",
        b"a: 'unterminated",
        b"\"\\u12\"",
        b"%YAML 1.2\n%YAML 1.2\n---\n",
        b"!<",
        b"!!int foo",
        b"\t\ta: b",
        b"a:\n\t- b",
        b"<<: 5",
        b"<<: [1]",
        b"x: !!seq a",
        b"? |\n a\n: b",
    ];
    for s in samples {
        let _ = parse_documents("g.yaml", s, &Limits::default());
    }
    // Pseudo-random bytes from a fixed seed.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let alphabet = b"ab:-[]{},&*!|>'\"#?\n \t.0x<~";
    for _ in 0..2000 {
        let len = (state % 64) as usize;
        let mut bytes = Vec::with_capacity(len);
        for _ in 0..len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            bytes.push(alphabet[(state % alphabet.len() as u64) as usize]);
        }
        let _ = parse_documents("g.yaml", &bytes, &Limits::default());
    }
}
