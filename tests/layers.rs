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
    &["sync"],
    &["controller"],
    &["simulate", "plan", "serve"],
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
];

/// Edges that break the picture, each listed in ARCHITECTURE.md's "Known
/// exceptions": remove one here and there when the code stops using it.
const EXCEPTIONS: &[(&str, &str)] = &[
    ("simulate", "serve"),
    ("cloud", "interruption"),
    ("interruption", "cloud"),
    ("cluster", "config"),
    ("cloud", "convert"),
    ("drift", "config"),
];

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

/// Every `crate::` edge between top-level modules, with where it is used.
fn edges() -> BTreeMap<(String, String), Vec<String>> {
    let src = repo().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let tests = test_files(&files);
    // Inline test modules end a file in this code base.
    let test_module = Regex::new(
        r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([a-z]+\))?\s+)?mod\s+\w+\s*\{",
    )
    .unwrap();
    let path = Regex::new(r"crate::(\{[^}]*\}?|[a-z_]+)").unwrap();
    let first = Regex::new(r"(?:^|[{,])\s*([a-z_]+)").unwrap();
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for f in files.iter().filter(|f| !tests.contains(*f)) {
        let rel = f
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let top = rel.split('/').next().unwrap().trim_end_matches(".rs");
        if top == "lib" || top == "main" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let code = match test_module.find(&text) {
            Some(m) => &text[..m.start()],
            None => &text,
        };
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
}
