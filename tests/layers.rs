//! The layers of ARCHITECTURE.md, checked against the code: every
//! `crate::` path of non-test code in `src/`, by top-level module, must go
//! down the layers or along an arrow the page draws, or be one of the known
//! exceptions the page lists. An exception that no longer occurs fails too,
//! so the list only shrinks, and the page is kept true in both directions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// The rows of the layer diagram, from the bottom: a module may use any
/// module of a lower row.
const ROWS: &[&[&str]] = &[
    &[
        "diag", "par", "clock", "fsutil", "model", "api", "timing", "metrics",
    ],
    &["scheduling", "drift", "disruption", "buffers"],
    &[
        "convert",
        "snapshot",
        "config",
        "cloud",
        "cluster",
        "interruption",
    ],
    &["sync", "world"],
    &["controller"],
    &["simulate", "plan"],
    &["cli", "fuzzing"],
];

/// The arrows drawn within a row.
const ARROWS: &[(&str, &str)] = &[
    ("api", "model"),
    ("api", "fsutil"),
    ("timing", "clock"),
    ("metrics", "clock"),
    ("disruption", "drift"),
    ("disruption", "scheduling"),
    ("buffers", "scheduling"),
    ("convert", "snapshot"),
    ("convert", "config"),
    ("snapshot", "config"),
    ("cloud", "cluster"),
    ("interruption", "cloud"),
];

/// The simulated world stands in for real components; only these modules,
/// which run or serve a simulation, may use it: production code never does.
const WORLD_USERS: &[&str] = &["simulate", "cli", "fuzzing"];

/// Edges that break the picture, each listed in ARCHITECTURE.md's "Known
/// exceptions": remove one here and there when the code stops using it.
const EXCEPTIONS: &[(&str, &str)] = &[];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ reads") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files only tests compile: those declared after `#[cfg(test)]` as
/// `mod name;` (with or without a `#[path]`).
fn test_files(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let declared = Regex::new(
        r#"#\[cfg\(test\)\]\s*(?:#\[path\s*=\s*"([^"]+)"\]\s*)?(?:#\[[^\]]*\]\s*)*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;"#,
    )
    .unwrap();
    let mut out = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        let parent = f.parent().unwrap();
        let stem = f.file_stem().unwrap().to_string_lossy();
        let dir = if stem == "mod" || stem == "lib" {
            parent.to_path_buf()
        } else {
            parent.join(&*stem)
        };
        for c in declared.captures_iter(&text) {
            match c.get(1) {
                Some(path) => {
                    out.insert(parent.join(path.as_str()));
                }
                None => {
                    out.insert(dir.join(format!("{}.rs", &c[2])));
                    out.insert(dir.join(&c[2]).join("mod.rs"));
                }
            }
        }
    }
    out
}

/// The non-test code of every file under `src/` but `lib.rs` and
/// `main.rs`, by path relative to `src/`: files only tests compile are left
/// out, and an inline test module ends a file in this code base.
fn sources() -> Vec<(String, String)> {
    let src = repo().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let tests = test_files(&files);
    let test_module = Regex::new(
        r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([a-z]+\))?\s+)?mod\s+\w+\s*\{",
    )
    .unwrap();
    let mut out = Vec::new();
    // A test module's directory holds only test code.
    let test_dirs: Vec<&Path> = tests
        .iter()
        .filter(|t| t.file_name().is_some_and(|n| n == "mod.rs"))
        .filter_map(|t| t.parent())
        .collect();
    let is_test = |f: &Path| tests.contains(f) || test_dirs.iter().any(|d| f.starts_with(d));
    for f in files.iter().filter(|f| !is_test(f)) {
        let rel = f
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "lib.rs" || rel == "main.rs" {
            continue;
        }
        let mut text = std::fs::read_to_string(f).unwrap();
        if let Some(m) = test_module.find(&text) {
            text.truncate(m.start());
        }
        out.push((rel, text));
    }
    out
}

/// Every `crate::` edge between top-level modules, with where it is used.
fn edges() -> BTreeMap<(String, String), Vec<String>> {
    let path = Regex::new(r"crate::(\{[^}]*\}?|[a-z_]+)").unwrap();
    let first = Regex::new(r"(?:^|[{,])\s*([a-z_]+)").unwrap();
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (rel, code) in sources() {
        let top = rel.split('/').next().unwrap().trim_end_matches(".rs");
        for (i, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap_or("");
            for m in path.captures_iter(line) {
                let names: Vec<&str> = if m[1].starts_with('{') {
                    first
                        .captures_iter(&m[1])
                        .map(|c| c.get(1).unwrap().as_str())
                        .collect()
                } else {
                    vec![m.get(1).unwrap().as_str()]
                };
                for n in names.into_iter().filter(|n| *n != top && *n != "self") {
                    out.entry((top.to_string(), n.to_string()))
                        .or_default()
                        .push(format!("src/{rel}:{}", i + 1));
                }
            }
        }
    }
    out
}

fn row_of(module: &str) -> Option<usize> {
    ROWS.iter().position(|r| r.contains(&module))
}

fn allowed(from: &str, to: &str) -> bool {
    if to == "world" && !WORLD_USERS.contains(&from) {
        return false;
    }
    match (row_of(from), row_of(to)) {
        (Some(a), Some(b)) => b < a || (a == b && ARROWS.contains(&(from, to))),
        _ => false,
    }
}

#[test]
fn every_module_is_in_one_layer() {
    let lib = std::fs::read_to_string(repo().join("src/lib.rs")).unwrap();
    let declared: BTreeSet<&str> = Regex::new(r"(?m)^pub mod (\w+);")
        .unwrap()
        .captures_iter(&lib)
        .map(|c| c.get(1).unwrap().as_str())
        .collect();
    let layered: BTreeSet<&str> = ROWS.iter().flat_map(|r| r.iter().copied()).collect();
    assert_eq!(declared, layered, "src/lib.rs's modules against the rows");
    assert_eq!(
        layered.len(),
        ROWS.iter().map(|r| r.len()).sum::<usize>(),
        "a module in two rows"
    );
}

#[test]
fn the_code_keeps_to_the_layers() {
    let edges = edges();
    let broken: Vec<String> = edges
        .iter()
        .filter(|((a, b), _)| !allowed(a, b) && !EXCEPTIONS.contains(&(a.as_str(), b.as_str())))
        .map(|((a, b), at)| format!("{a} -> {b}: {}", at.join(", ")))
        .collect();
    assert!(
        broken.is_empty(),
        "uses against the layers of ARCHITECTURE.md (move the code, or draw the arrow there and here):\n{}",
        broken.join("\n")
    );
    let gone: Vec<String> = EXCEPTIONS
        .iter()
        .filter(|(a, b)| !edges.contains_key(&(a.to_string(), b.to_string())))
        .map(|(a, b)| format!("{a} -> {b}"))
        .collect();
    assert!(
        gone.is_empty(),
        "known exceptions no longer in the code: remove them here and from ARCHITECTURE.md: {gone:?}"
    );
}

/// What the test knows, the page says: every module in its diagram, and
/// every exception in its list.
#[test]
fn architecture_md_draws_the_layers_the_code_keeps() {
    let page = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let diagram = page
        .split("```text")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("ARCHITECTURE.md has a ```text diagram");
    let word = |w: &str| Regex::new(&format!(r"\b{w}\b")).unwrap();
    let missing: Vec<&str> = ROWS
        .iter()
        .flat_map(|r| r.iter().copied())
        .filter(|m| !word(m).is_match(diagram))
        .collect();
    assert!(
        missing.is_empty(),
        "modules missing from the diagram: {missing:?}"
    );
    let exceptions = page
        .split("### Known exceptions")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("ARCHITECTURE.md has a Known exceptions section");
    let unlisted: Vec<String> = EXCEPTIONS
        .iter()
        .filter(|(a, b)| {
            ![
                format!("`{a}` → `{b}`"),
                format!("`{a}` ⇄ `{b}`"),
                format!("`{b}` ⇄ `{a}`"),
            ]
            .iter()
            .any(|s| exceptions.contains(s.as_str()))
        })
        .map(|(a, b)| format!("{a} -> {b}"))
        .collect();
    assert!(
        unlisted.is_empty(),
        "exceptions the page does not list: {unlisted:?}"
    );
}

/// The rule itself: a use across rows goes down, within a row only along
/// an arrow; so the layers, less the exceptions, have no cycle.
#[test]
fn the_layer_rule_admits_only_downward_uses() {
    assert!(allowed("controller", "scheduling"));
    assert!(!allowed("scheduling", "controller"));
    assert!(allowed("convert", "snapshot"));
    assert!(!allowed("snapshot", "convert"));
    assert!(
        !allowed("convert", "cloud"),
        "inputs and adapters are apart"
    );
    assert!(!allowed("nowhere", "model"));
    assert!(allowed("simulate", "world"));
    assert!(
        !allowed("controller", "world"),
        "production code does not use the simulated world"
    );
}

/// Cycles among the files (and subdirectories) of one directory that the
/// code still has, each listed in ARCHITECTURE.md's "Known exceptions" as
/// "`dir`: a ⇄ b": remove one here and there when it is broken.
const KNOWN_CYCLES: &[(&str, &[&str])] = &[];

/// The module path of a file under `src/`: `controller/disruption.rs` is
/// `[controller, disruption]`, `cloud/aws/mod.rs` is `[cloud, aws]`.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Every directory's sibling modules and the uses between them: a path
/// (`super::x`, `self::x`, `crate::dir::x`) into a sibling, or a call
/// `self.m(` / `Self::m(` of a method that one other sibling alone
/// defines (the controller's loops are methods of one type, each file
/// adding its own). Keyed by directory, then edge.
fn sibling_edges() -> BTreeMap<String, BTreeMap<(String, String), Vec<String>>> {
    let path = Regex::new(r"\b(crate|super|self)((?:::super)*)::((?:[a-z_][a-z0-9_]*::)*)(\{[^}]*\}?|[a-z_][a-z0-9_]*)").unwrap();
    let first = Regex::new(r"(?:^|[{,])\s*([a-z_][a-z0-9_]*)").unwrap();
    let method_def =
        Regex::new(r"fn\s+([a-z_][a-z0-9_]*)\s*(?:<[^>{]*>)?\s*\(\s*(?:&\s*)?(?:mut\s+)?self\b")
            .unwrap();
    let method_use = Regex::new(r"(?:\bself\s*\.\s*|\bSelf::)([a-z_][a-z0-9_]*)\s*\(").unwrap();

    // (module path, relative name, code) of every non-test file.
    let code: Vec<(Vec<String>, String, String)> = sources()
        .into_iter()
        .map(|(rel, text)| (module_path(&rel), rel, text))
        .collect();
    let modules: BTreeSet<Vec<String>> = code.iter().map(|(m, _, _)| m.clone()).collect();
    // The sibling a module path falls in, under `dir`.
    let unit_under = |dir: &[String], m: &[String]| -> Option<String> {
        (m.len() > dir.len() && m.starts_with(dir)).then(|| m[dir.len()].clone())
    };
    // Methods by directory and name: the siblings that define them.
    let mut defined: BTreeMap<(Vec<String>, String), BTreeSet<String>> = BTreeMap::new();
    for (m, _, text) in &code {
        for dir_len in 1..m.len() {
            let dir = &m[..dir_len];
            let unit = m[dir_len].clone();
            for c in method_def.captures_iter(text) {
                defined
                    .entry((dir.to_vec(), c[1].to_string()))
                    .or_default()
                    .insert(unit.clone());
            }
        }
    }
    let mut out: BTreeMap<String, BTreeMap<(String, String), Vec<String>>> = BTreeMap::new();
    let mut add = |dir: &[String], from: &str, to: &str, at: String| {
        if from != to {
            out.entry(dir.join("/"))
                .or_default()
                .entry((from.to_string(), to.to_string()))
                .or_default()
                .push(at);
        }
    };
    for (m, rel, text) in &code {
        let is_mod = rel.ends_with("mod.rs");
        for (i, line) in text.lines().enumerate() {
            let line = line.split("//").next().unwrap_or("");
            for c in path.captures_iter(line) {
                let mut base: Vec<String> = match &c[1] {
                    "crate" => Vec::new(),
                    // `super` of `a/b.rs` is `a`; of `a/b/mod.rs`, also `a`.
                    "super" => m[..m.len() - 1].to_vec(),
                    _ => m.clone(),
                };
                for _ in 0..c[2].matches("super").count() {
                    base.pop();
                }
                base.extend(
                    c[3].split("::")
                        .filter(|s| !s.is_empty())
                        .map(str::to_string),
                );
                let names: Vec<String> = if c[4].starts_with('{') {
                    first
                        .captures_iter(&c[4])
                        .map(|n| n[1].to_string())
                        .collect()
                } else {
                    vec![c[4].to_string()]
                };
                for n in names {
                    let mut target = base.clone();
                    target.push(n);
                    // The longest module the target names.
                    while !target.is_empty() && !modules.contains(&target) {
                        target.pop();
                    }
                    for dir_len in 1..m.len().min(target.len()) {
                        let dir = &m[..dir_len];
                        if let (Some(a), Some(b)) = (unit_under(dir, m), unit_under(dir, &target)) {
                            add(dir, &a, &b, format!("src/{rel}:{}", i + 1));
                        }
                    }
                }
            }
            for c in method_use.captures_iter(line) {
                for dir_len in 1..m.len() {
                    let dir = &m[..dir_len];
                    let unit = &m[dir_len];
                    if let Some(owners) = defined.get(&(dir.to_vec(), c[1].to_string()))
                        && owners.len() == 1
                        && !owners.contains(unit)
                        && !(is_mod && dir_len + 1 == m.len())
                    {
                        let owner = owners.iter().next().unwrap();
                        add(dir, unit, owner, format!("src/{rel}:{} ({})", i + 1, &c[1]));
                    }
                }
            }
        }
    }
    out
}

/// The strongly connected sets of more than one node (Tarjan's).
fn cycles(edges: &BTreeMap<(String, String), Vec<String>>) -> Vec<BTreeSet<String>> {
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        graph.entry(a).or_default().push(b);
        graph.entry(b).or_default();
    }
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(v: &'a str, graph: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut State<'a>) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        for &w in &graph[v] {
            if !s.index.contains_key(w) {
                visit(w, graph, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.stack.contains(&w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                set.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                s.out.push(set);
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for &v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(v, &graph, &mut s);
        }
    }
    s.out
}

/// Within each directory, the files use each other without a cycle: a
/// helper two loops share lives in its own file (or a lower layer), not in
/// one of the loops. The known cycles are listed; one that is gone fails
/// too.
#[test]
fn the_files_of_a_directory_form_no_cycle() {
    let all = sibling_edges();
    let mut found = Vec::new();
    for (dir, edges) in &all {
        for set in cycles(edges) {
            let listed = KNOWN_CYCLES.iter().any(|(d, members)| {
                d == dir
                    && members
                        .iter()
                        .map(|m| m.to_string())
                        .collect::<BTreeSet<_>>()
                        == set
            });
            if !listed {
                let at: Vec<String> = edges
                    .iter()
                    .filter(|((a, b), _)| set.contains(a) && set.contains(b))
                    .map(|((a, b), at)| format!("  {a} -> {b}: {}", at.join(", ")))
                    .collect();
                found.push(format!("{dir}: {set:?}\n{}", at.join("\n")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cycles among the files of a directory (move what both use into its own file):\n{}",
        found.join("\n")
    );
    let gone: Vec<String> = KNOWN_CYCLES
        .iter()
        .filter(|(d, members)| {
            let want: BTreeSet<String> = members.iter().map(|m| m.to_string()).collect();
            !all.get(*d).is_some_and(|e| cycles(e).contains(&want))
        })
        .map(|(d, m)| format!("{d}: {m:?}"))
        .collect();
    assert!(
        gone.is_empty(),
        "known cycles no longer in the code: {gone:?}"
    );
}

/// The sibling edges are read as the compiler resolves them: `super` from
/// a file and from a directory's `mod.rs`, a `crate::` path into a
/// sibling's subdirectory, and a method one sibling alone defines.
#[test]
fn sibling_edges_resolve_paths_and_methods() {
    let all = sibling_edges();
    let controller = &all["controller"];
    assert!(
        controller.contains_key(&("disruption".into(), "claims".into())),
        "super::claims::..."
    );
    assert!(
        controller.contains_key(&("disruption".into(), "lifecycle".into())),
        "self.delete_claim(...), defined in lifecycle.rs"
    );
    assert!(
        !controller.keys().any(|(a, _)| a == "mod"),
        "mod.rs is the directory itself, not a sibling"
    );
    assert_eq!(module_path("cloud/aws/mod.rs"), ["cloud", "aws"]);
    assert_eq!(
        module_path("cloud/aws/launch.rs"),
        ["cloud", "aws", "launch"]
    );
}

/// One placement rule for unit tests (`src/testing.rs` states it): a
/// file's inline `#[cfg(test)] mod`s are the last things in the file, so
/// everything before it is production code, as `sources` assumes; larger
/// test modules are files of their own. Braces inside strings, characters
/// and comments are skipped when the module's end is found.
#[test]
fn inline_test_modules_end_their_file() {
    let src = repo().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let test_module = Regex::new(
        r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([a-z]+\))?\s+)?mod\s+\w+\s*\{",
    )
    .unwrap();
    let mut misplaced = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let Some(m) = test_module.find(&text) else {
            continue;
        };
        // Only more test modules may follow (a property-test module, say).
        let mut end = block_end(&text, m.end() - 1);
        while let Some(next) = test_module.find_at(&text, end)
            && text[end..next.start()].trim().is_empty()
        {
            end = block_end(&text, next.end() - 1);
        }
        let after = text[end..].trim();
        if !after.is_empty() {
            let line = text[..end].lines().count();
            misplaced.push(format!(
                "{}:{line}: code after the test module",
                f.strip_prefix(&src).unwrap().display()
            ));
        }
    }
    assert!(misplaced.is_empty(), "{misplaced:#?}");
}

/// The byte after the `}` that closes the `{` at `open`, skipping string,
/// raw string, character literals and comments.
fn block_end(text: &str, open: usize) -> usize {
    let b = text.as_bytes();
    let mut depth = 0usize;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
                continue;
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#'))
                && !b[i.saturating_sub(1)].is_ascii_alphanumeric() =>
            {
                let mut hashes = 0;
                let mut j = i + 1;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                j += 1;
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                i = j + close.len();
                continue;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                continue;
            }
            b'\'' => {
                // A character literal ('x', '\n', '\u{..}'), not a lifetime.
                let rest = &text[i + 1..];
                let len = if rest.starts_with('\\') {
                    rest.get(2..).and_then(|r| r.find('\'')).map(|n| n + 3)
                } else {
                    rest.chars()
                        .next()
                        .filter(|c| rest[c.len_utf8()..].starts_with('\''))
                        .map(|c| c.len_utf8() + 1)
                };
                i += 1 + len.unwrap_or(0);
                continue;
            }
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}
