//! YAML parsing with positions. Every node of a parsed document keeps the
//! line and column it came from, so a diagnostic about a JSON path can point
//! at the most specific YAML node. Parsing is bounded: file size, document
//! count, nesting depth and alias expansion all have limits, and a file that
//! breaks one gets a diagnostic instead of a panic or a hang.
//!
//! # Why the tree is built from parser events
//!
//! The tree is built from the event stream of `granit-parser`, the parser
//! serde-saphyr itself uses (re-exported as `serde_saphyr::granit_parser`, so
//! no extra dependency), rather than through serde-saphyr's `Deserialize`
//! path. serde-saphyr's `from_multiple` skips empty and null documents (so an
//! empty document could not yield a `Null` root and document indexes would
//! shift), aborts the whole file on the first error (losing the documents
//! that were fine), and would need a `Spanned` wrapper around every node.
//! Driving the parser directly gives a position for every node and key, keeps
//! the good documents of a file with one broken document (the parser resyncs
//! at the next `---`), and lets the duplicate-key diagnostic name the line of
//! the first occurrence.
//!
//! granit-parser reads about 25 MB/s, too slow for 10,000 documents in well
//! under 0.3 s, so a line-based reader (`mod fast`) handles the block-style
//! subset configuration files are written in and feeds the same builder with
//! the same events and positions; on anything outside it, it gives up and the
//! file is parsed by granit-parser. Tests compare the two on fixed and
//! generated inputs.
//!
//! # Scalar resolution
//!
//! Plain scalars resolve as Kubernetes reads YAML (`sigs.k8s.io/yaml`, which is
//! YAML 1.1 as implemented by go-yaml v2), because that is what the API server
//! will see when the file is applied:
//! - null: empty, `~`, `null`, `Null`, `NULL`;
//! - booleans: `true`/`false`, `yes`/`no`, `y`/`n`, `on`/`off` in lower,
//!   capitalised and upper case (so an unquoted `yes` is a boolean, as in
//!   kubectl);
//! - integers: decimal with optional sign, `0x` hex, `0o` and leading-`0`
//!   octal, `0b` binary, `_` separators ignored; values beyond `u64`/`i64`
//!   become floats, as in JSON;
//! - floats: `1.5`, `1e3`, `.5`; `.inf`/`.nan` are floats in YAML but cannot be
//!   represented in JSON (Kubernetes rejects them), so they are reported as an
//!   error and kept as strings; a literal that overflows `f64` stays a string;
//! - timestamps stay strings (go-yaml v2 does the same for untyped targets);
//! - anything quoted or in block style is a string. Explicit core tags
//!   (`!!str`, `!!int`, `!!float`, `!!bool`, `!!null`) are honoured; the
//!   non-specific `!` and unknown tags make a string.
//!
//! Mapping keys are strings: a key that resolves to a boolean or number is
//! converted to its text (`yes:` becomes `"true"`, `0x10:` becomes `"16"`, as
//! `sigs.k8s.io/yaml` does); null and collection keys are errors.
//!
//! Aliases are expanded (the root of the copy takes the position of the `*alias`,
//! its descendants keep the positions of the anchored definition). Merge keys
//! (`<<: *base` or `<<: [*a, *b]`) are applied: keys written in the mapping
//! itself win, then earlier merge sources win over later ones; merged entries
//! keep the positions of their definition.
//!
//! Errors inside an otherwise well-formed document (a duplicate key, an invalid
//! key or value) are reported and the document is kept (for a duplicate key,
//! the last value wins, as the API server does when it only warns), so the
//! validator can still check the rest of it. A syntax error drops the document
//! it is in; parsing resumes at the next `---`. Breaking a limit (nesting
//! depth, alias expansion, document count) stops parsing the file; documents
//! completed before that are kept.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_saphyr::granit_parser::{
    ErrorKind, Event, Marker, Parser, ScalarStyle, ScanError, Span, Tag,
};

use crate::diag::{Diagnostic, JsonPath, Pos, Seg};

/// One node of a YAML document with its position.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub pos: Pos,
    pub value: Value,
}

/// The value of a node, after YAML scalar resolution (as Kubernetes' YAML
/// reader resolves them: null, booleans, integers, floats, strings).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    Str(String),
    Seq(Vec<Node>),
    /// Keys in document order. Duplicate keys are rejected by the parser.
    Map(Vec<(Key, Node)>),
}

/// A mapping key with its own position.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub name: String,
    pub pos: Pos,
}

/// One document of a multi-document YAML file.
#[derive(Debug, Clone, PartialEq)]
pub struct YamlDoc {
    /// 0-based index of the document in its file.
    pub index: usize,
    pub root: Node,
}

/// Bounds on what one file may make the parser do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Files larger than this are reported without being read or parsed.
    pub max_file_bytes: u64,
    /// Deepest nesting of sequences and mappings in a document.
    pub max_depth: usize,
    /// Most documents (`---`) in one file.
    pub max_documents: usize,
    /// Most nodes that alias expansion may create in one file. The text that
    /// expansion copies is also capped, at `max_file_bytes`.
    pub max_alias_nodes: usize,
}

/// Kubernetes objects are stored in etcd, which caps a value at about 1.5 MiB;
/// a config file several times that size is almost certainly a mistake.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;
/// Kubernetes objects are shallow; 64 levels leaves room for any real one.
pub const DEFAULT_MAX_DEPTH: usize = 64;
/// Far beyond any hand-written file, small enough to bound the work.
pub const DEFAULT_MAX_DOCUMENTS: usize = 10_000;
/// Real configs alias a few small blocks; a million nodes is a billion-laughs attack.
pub const DEFAULT_MAX_ALIAS_NODES: usize = 100_000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_depth: DEFAULT_MAX_DEPTH,
            max_documents: DEFAULT_MAX_DOCUMENTS,
            max_alias_nodes: DEFAULT_MAX_ALIAS_NODES,
        }
    }
}

/// The documents of one file and the problems found while parsing it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedFile {
    pub docs: Vec<YamlDoc>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Diagnostic codes produced here.
pub mod codes {
    /// The file is not valid YAML.
    pub const SYNTAX: &str = "yaml-syntax";
    /// A mapping has the same key twice.
    pub const DUPLICATE_KEY: &str = "yaml-duplicate-key";
    /// A mapping key that is not a string, number or boolean.
    pub const INVALID_KEY: &str = "yaml-invalid-key";
    /// A scalar that cannot be represented as JSON or does not match its tag.
    pub const INVALID_VALUE: &str = "yaml-invalid-value";
    /// Nesting, alias expansion or document count beyond the limits.
    pub const LIMIT: &str = "yaml-limit";
    /// The file is larger than `max_file_bytes`.
    pub const FILE_TOO_LARGE: &str = "file-too-large";
    /// The file contains NUL bytes.
    pub const NOT_TEXT: &str = "not-text";
    /// The file is not valid UTF-8.
    pub const INVALID_UTF8: &str = "invalid-utf8";
}

/// The diagnostic for a file larger than `limits.max_file_bytes`; shared with
/// the repository reader, which checks sizes before reading.
pub fn file_too_large(file: &str, size: u64, limits: &Limits) -> Diagnostic {
    Diagnostic::error(
        codes::FILE_TOO_LARGE,
        format!(
            "file is {} bytes, over the limit of {} bytes; not parsed",
            size, limits.max_file_bytes
        ),
    )
    .in_file(file)
    .with_hint(
        "Kubernetes objects are capped at about 1.5 MiB by etcd; \
         split the file or check that it is really configuration",
    )
}

/// Parses every document of one file. Never panics; every problem becomes a
/// diagnostic in the result, with `file` as its file name.
pub fn parse_documents(file: &str, bytes: &[u8], limits: &Limits) -> ParsedFile {
    let mut out = ParsedFile::default();
    if bytes.len() as u64 > limits.max_file_bytes {
        out.diagnostics
            .push(file_too_large(file, bytes.len() as u64, limits));
        return out;
    }
    if let Some(offset) = bytes.iter().position(|&b| b == 0) {
        out.diagnostics.push(
            Diagnostic::error(
                codes::NOT_TEXT,
                format!("not a text file (NUL byte at offset {offset})"),
            )
            .in_file(file)
            .at(byte_pos(bytes, offset))
            .with_hint(
                "dovetail reads UTF-8 YAML; remove binary files or add them to .dovetailignore",
            ),
        );
        return out;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let offset = e.valid_up_to();
            let pos = byte_pos(bytes, offset);
            out.diagnostics.push(
                Diagnostic::error(
                    codes::INVALID_UTF8,
                    format!("invalid UTF-8 at byte offset {offset} (line {})", pos.line),
                )
                .in_file(file)
                .at(pos)
                .with_hint("save the file as UTF-8"),
            );
            return out;
        }
    };
    // Most configuration files use a small, regular part of YAML that a
    // line-based reader handles several times faster than the general
    // parser. It feeds the same tree builder and gives up (`Fast::Bail`) on
    // anything outside that part, and the file is then parsed from scratch.
    if fast::run(text, &mut Builder::new(file, limits, &mut out)) == fast::Fast::Bail {
        out = ParsedFile::default();
        Builder::new(file, limits, &mut out).run(text);
    }
    out
}

/// Line and column of a byte offset, for errors found before parsing.
fn byte_pos(bytes: &[u8], offset: usize) -> Pos {
    let before = &bytes[..offset.min(bytes.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    // Count characters, not bytes, up to the offset (the prefix is valid UTF-8
    // for the invalid-UTF-8 case; lossy counting is fine otherwise).
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    Pos {
        line: to_u32(line),
        column: to_u32(column),
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn marker_pos(m: &Marker) -> Pos {
    Pos {
        line: to_u32(m.line()),
        column: to_u32(m.col().saturating_add(1)),
    }
}

fn span_pos(s: &Span) -> Pos {
    marker_pos(&s.start)
}

/// A collection being built.
enum Frame {
    Seq {
        pos: Pos,
        anchor: usize,
        items: Vec<Node>,
    },
    Map {
        pos: Pos,
        anchor: usize,
        entries: Vec<(Key, Node)>,
        /// The key waiting for its value.
        pending: Pending,
        /// `<<` merge sources: the index in `entries` at which they were
        /// written, and the merged value.
        merges: Vec<(usize, Node)>,
        /// Key name to index in `entries`, built once the map is large enough
        /// that a linear scan for duplicates would be slow.
        index: Option<HashMap<String, usize>>,
    },
}

/// What the next node in a mapping is.
enum Pending {
    /// A key.
    Key,
    /// The value of this key.
    Value(Key),
    /// The value of a `<<` merge key.
    Merge(Pos),
    /// The value of an invalid key, to be discarded.
    Discard,
}

/// Maps with more entries than this get a hash index for duplicate checks.
const LINEAR_KEY_SCAN: usize = 16;

/// A fatal problem: parsing of the file stops.
struct Stop;

struct Builder<'a> {
    file: &'a str,
    limits: &'a Limits,
    out: &'a mut ParsedFile,
    stack: Vec<Frame>,
    root: Option<Node>,
    /// Anchored nodes of the current document by anchor id, with the cost
    /// of copying them.
    anchors: HashMap<usize, (Node, Cost)>,
    alias_nodes: usize,
    alias_bytes: u64,
    documents: usize,
    doc_pos: Pos,
}

/// Size of a subtree, for alias budgets.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    nodes: usize,
    bytes: u64,
    height: usize,
}

impl<'a> Builder<'a> {
    fn new(file: &'a str, limits: &'a Limits, out: &'a mut ParsedFile) -> Self {
        Builder {
            file,
            limits,
            out,
            stack: Vec::new(),
            root: None,
            anchors: HashMap::new(),
            alias_nodes: 0,
            alias_bytes: 0,
            documents: 0,
            doc_pos: Pos::default(),
        }
    }

    fn run(mut self, text: &str) {
        let mut options = serde_saphyr::granit_parser::Options::default();
        options.set_emit_comments(false);
        // The parser enforces nesting too, so that 100,000 `[` fail fast
        // without building a deep parser stack.
        let nesting = self.limits.max_depth.saturating_add(1);
        options.flow_nesting_limit = nesting;
        options.block_nesting_limit = nesting;
        let mut parser = Parser::new_from_str_with_options(text, options);
        loop {
            match parser.next_event() {
                None => return,
                Some(Ok((event, span))) => {
                    if self.event(event, span_pos(&span)).is_err() {
                        return;
                    }
                }
                Some(Err(err)) => {
                    if self.scan_error(&err).is_err() {
                        return;
                    }
                    // Abandon the broken document and resume at the next `---`.
                    self.stack.clear();
                    self.root = None;
                    self.anchors.clear();
                    match parser.proceed_next_document() {
                        Ok(true) => {}
                        Ok(false) => return,
                        Err(err) => {
                            // Already past the error position; report and stop.
                            let _ = self.scan_error(&err);
                            return;
                        }
                    }
                }
            }
        }
    }

    fn error(&mut self, code: &'static str, pos: Pos, message: String) {
        self.out
            .diagnostics
            .push(Diagnostic::error(code, message).in_file(self.file).at(pos));
    }

    /// A budget breached: which limit, and what to do about it.
    fn limit(&mut self, pos: Pos, message: String, hint: &str) {
        self.out.diagnostics.push(
            Diagnostic::error(codes::LIMIT, message)
                .in_file(self.file)
                .at(pos)
                .with_hint(hint),
        );
    }

    fn scan_error(&mut self, err: &ScanError) -> Result<(), Stop> {
        let pos = marker_pos(err.marker());
        if matches!(err.kind(), ErrorKind::RecursionLimitExceeded) {
            return Err(self.too_deep(pos));
        }
        self.error(codes::SYNTAX, pos, err.info());
        Ok(())
    }

    fn too_deep(&mut self, pos: Pos) -> Stop {
        let message = format!(
            "depth limit: nesting deeper than {} levels; the file is not parsed further",
            self.limits.max_depth
        );
        self.limit(
            pos,
            message,
            "Kubernetes objects nest a few levels deep; check the indentation, or whether the file is really a manifest",
        );
        Stop
    }

    fn event(&mut self, event: Event<'_>, pos: Pos) -> Result<(), Stop> {
        match event {
            Event::DocumentStart(..) => {
                if self.documents >= self.limits.max_documents {
                    let message = format!(
                        "document limit: more than {} documents in one file; the rest is not parsed",
                        self.limits.max_documents
                    );
                    self.limit(
                        pos,
                        message,
                        "split the file into several files, or remove empty `---` documents",
                    );
                    return Err(Stop);
                }
                self.documents += 1;
                self.doc_pos = pos;
                self.stack.clear();
                self.root = None;
                self.anchors.clear();
            }
            Event::DocumentEnd => {
                let root = self.root.take().unwrap_or(Node {
                    pos: self.doc_pos,
                    value: Value::Null,
                });
                self.out.docs.push(YamlDoc {
                    index: self.documents.saturating_sub(1),
                    root,
                });
                self.anchors.clear();
            }
            Event::Scalar(text, style, anchor, tag) => {
                if self.wants_key() {
                    let key = self.scalar_key(&text, style, tag.as_deref(), pos, anchor);
                    self.key(key);
                    return Ok(());
                }
                let value = self.scalar_value(text, style, tag.as_deref(), pos);
                self.complete(Node { pos, value }, anchor)?;
            }
            Event::SequenceStart(_, anchor, _) => {
                self.push(
                    Frame::Seq {
                        pos,
                        anchor,
                        items: Vec::new(),
                    },
                    pos,
                )?;
            }
            Event::MappingStart(_, anchor, _) => {
                self.push(
                    Frame::Map {
                        pos,
                        anchor,
                        entries: Vec::new(),
                        pending: Pending::Key,
                        merges: Vec::new(),
                        index: None,
                    },
                    pos,
                )?;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(frame) = self.stack.pop() {
                    let (node, anchor) = self.finish(frame);
                    self.complete(node, anchor)?;
                }
            }
            Event::Alias(id) => self.alias(id, pos)?,
            // Stream markers, comments and anchor metadata carry no data.
            _ => {}
        }
        Ok(())
    }

    fn push(&mut self, frame: Frame, pos: Pos) -> Result<(), Stop> {
        if self.stack.len() >= self.limits.max_depth {
            return Err(self.too_deep(pos));
        }
        self.stack.push(frame);
        Ok(())
    }

    fn wants_key(&self) -> bool {
        matches!(
            self.stack.last(),
            Some(Frame::Map {
                pending: Pending::Key,
                ..
            })
        )
    }

    /// Expands `*alias`, within the alias budget.
    fn alias(&mut self, id: usize, pos: Pos) -> Result<(), Stop> {
        let Some((node, cost)) = self.anchors.get(&id) else {
            self.error(
                codes::SYNTAX,
                pos,
                "alias refers to a node that contains it (recursive alias)".to_string(),
            );
            if self.wants_key() {
                // The error is reported; drop the entry.
                if let Some(Frame::Map { pending, .. }) = self.stack.last_mut() {
                    *pending = Pending::Discard;
                }
                return Ok(());
            }
            return self.complete(Node::new(pos, Value::Null), 0);
        };
        let cost = *cost;
        if self.stack.len() + cost.height > self.limits.max_depth {
            return Err(self.too_deep(pos));
        }
        self.alias_nodes = self.alias_nodes.saturating_add(cost.nodes);
        self.alias_bytes = self.alias_bytes.saturating_add(cost.bytes);
        if self.alias_nodes > self.limits.max_alias_nodes
            || self.alias_bytes > self.limits.max_file_bytes
        {
            let message = format!(
                "alias limit: aliases expand to more than {} nodes or {} bytes (a \"billion laughs\" \
                 document?); the file is not parsed further",
                self.limits.max_alias_nodes, self.limits.max_file_bytes
            );
            self.limit(
                pos,
                message,
                "write the repeated parts out instead of through `*alias` references",
            );
            return Err(Stop);
        }
        let mut node = node.clone();
        node.pos = pos;
        if self.wants_key() {
            let key = key_from_value(node.value, pos);
            self.key(key);
            return Ok(());
        }
        self.complete(node, 0)
    }

    /// Resolves a scalar in key position; an anchored key can be aliased
    /// later, as a key or a value.
    fn scalar_key(
        &mut self,
        text: &str,
        style: ScalarStyle,
        tag: Option<&Tag>,
        pos: Pos,
        anchor: usize,
    ) -> KeyKind {
        if style == ScalarStyle::Plain && tag.is_none() && text == "<<" && anchor == 0 {
            return KeyKind::Merge(pos);
        }
        let value = self.scalar_value(Cow::Borrowed(text), style, tag, pos);
        if anchor != 0 {
            let node = Node::new(pos, value.clone());
            let cost = cost(&node);
            self.anchors.insert(anchor, (node, cost));
        }
        key_from_value(value, pos)
    }

    /// Records a key, or the problem with it, in the mapping on top of the stack.
    fn key(&mut self, key: KeyKind) {
        let Some(Frame::Map { pending, .. }) = self.stack.last_mut() else {
            return;
        };
        match key {
            KeyKind::Key(key) => *pending = Pending::Value(key),
            KeyKind::Merge(pos) => *pending = Pending::Merge(pos),
            KeyKind::Invalid(pos, what) => {
                *pending = Pending::Discard;
                self.error(
                    codes::INVALID_KEY,
                    pos,
                    format!("a mapping key is {what}; keys must be strings"),
                );
            }
        }
    }

    fn scalar_value(
        &mut self,
        text: Cow<'_, str>,
        style: ScalarStyle,
        tag: Option<&Tag>,
        pos: Pos,
    ) -> Value {
        let core = tag.map(|t| t.core_suffix().or_else(|| yaml11_suffix(t)));
        match core {
            // Untagged: plain scalars are resolved, others are strings.
            None if style == ScalarStyle::Plain => match resolve_plain(&text) {
                Resolved::Value(v) => v,
                Resolved::NonFinite => {
                    self.error(
                        codes::INVALID_VALUE,
                        pos,
                        format!(
                            "`{text}` is not a finite number; Kubernetes objects are JSON, \
                             which cannot hold infinity or NaN"
                        ),
                    );
                    Value::Str(text.into_owned())
                }
            },
            None => Value::Str(text.into_owned()),
            Some(Some("str" | "binary" | "timestamp")) => Value::Str(text.into_owned()),
            Some(Some("null")) => Value::Null,
            Some(Some(expected @ ("bool" | "int" | "float"))) => {
                let resolved = match resolve_plain(&text) {
                    Resolved::Value(v) => Some(v),
                    Resolved::NonFinite => None,
                };
                let value = match (expected, resolved) {
                    ("bool", Some(v @ Value::Bool(_))) => Some(v),
                    ("int", Some(Value::Number(n))) if !n.is_f64() => Some(Value::Number(n)),
                    ("float", Some(Value::Number(n))) => n
                        .as_f64()
                        .and_then(serde_json::Number::from_f64)
                        .map(Value::Number),
                    _ => None,
                };
                value.unwrap_or_else(|| {
                    self.error(
                        codes::INVALID_VALUE,
                        pos,
                        format!("`{text}` is not a valid !!{expected}"),
                    );
                    Value::Str(text.into_owned())
                })
            }
            Some(Some(other @ ("seq" | "map"))) => {
                self.error(
                    codes::INVALID_VALUE,
                    pos,
                    format!("a scalar is tagged !!{other}"),
                );
                Value::Str(text.into_owned())
            }
            // The non-specific tag `!` and application tags: a string, as go-yaml does.
            Some(_) => Value::Str(text.into_owned()),
        }
    }

    /// Adds a finished node to its parent, or makes it the document root.
    fn complete(&mut self, node: Node, anchor: usize) -> Result<(), Stop> {
        if anchor != 0 {
            let cost = cost(&node);
            self.anchors.insert(anchor, (node.clone(), cost));
        }
        let Some(parent) = self.stack.last_mut() else {
            self.root = Some(node);
            return Ok(());
        };
        let problem = match parent {
            Frame::Seq { items, .. } => {
                items.push(node);
                None
            }
            Frame::Map {
                entries,
                pending,
                merges,
                index,
                ..
            } => match std::mem::replace(pending, Pending::Key) {
                Pending::Key => {
                    // A collection in key position: drop it and its value.
                    *pending = Pending::Discard;
                    Some((
                        codes::INVALID_KEY,
                        node.pos,
                        "a mapping key is a collection; keys must be strings".to_string(),
                    ))
                }
                Pending::Value(key) => insert_entry(entries, index, key, node),
                Pending::Merge(key_pos) => match node.value {
                    Value::Map(_) => {
                        merges.push((entries.len(), node));
                        None
                    }
                    Value::Seq(items) if items.iter().all(|n| matches!(n.value, Value::Map(_))) => {
                        let at = entries.len();
                        merges.extend(items.into_iter().map(|n| (at, n)));
                        None
                    }
                    _ => Some((
                        codes::INVALID_VALUE,
                        key_pos,
                        "the value of a `<<` merge key must be a mapping or a list of mappings"
                            .to_string(),
                    )),
                },
                Pending::Discard => None,
            },
        };
        if let Some((code, pos, message)) = problem {
            self.error(code, pos, message);
        }
        Ok(())
    }

    /// Turns a closed collection into a node, applying merge keys.
    fn finish(&mut self, frame: Frame) -> (Node, usize) {
        match frame {
            Frame::Seq { pos, anchor, items } => (
                Node {
                    pos,
                    value: Value::Seq(items),
                },
                anchor,
            ),
            Frame::Map {
                pos,
                anchor,
                entries,
                merges,
                index,
                ..
            } => {
                let entries = if merges.is_empty() {
                    entries
                } else {
                    apply_merges(entries, merges, index)
                };
                (
                    Node {
                        pos,
                        value: Value::Map(entries),
                    },
                    anchor,
                )
            }
        }
    }
}

/// What a scalar or alias in key position turned out to be.
enum KeyKind {
    Key(Key),
    /// A plain `<<`.
    Merge(Pos),
    /// Not usable as a key; names what it is.
    Invalid(Pos, &'static str),
}

/// Keys are strings; booleans and numbers become their text, as
/// `sigs.k8s.io/yaml` converts them.
fn key_from_value(value: Value, pos: Pos) -> KeyKind {
    let name = match value {
        Value::Str(s) => s,
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_f64() => go_float_key(n.as_f64().unwrap_or_default()),
        Value::Number(n) => n.to_string(),
        Value::Null => return KeyKind::Invalid(pos, "null"),
        Value::Seq(_) | Value::Map(_) => return KeyKind::Invalid(pos, "a collection"),
    };
    KeyKind::Key(Key { name, pos })
}

/// A float key's text as sigs.k8s.io/yaml writes it: go-yaml's
/// `strconv.FormatFloat(f, 'g', -1, 32)` (the shortest digits of the
/// float32, in exponent form below 1e-4 or from 1e6), `.inf`, `-.inf`,
/// `.nan`.
fn go_float_key(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    let x = f as f32;
    if x.is_infinite() {
        return if x > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    let sign = if x.is_sign_negative() { "-" } else { "" };
    if x == 0.0 {
        return format!("{sign}0");
    }
    // Rust's `{:e}` gives the shortest digits that read back as `x`.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{point}{rest}e{esign}{:02}", exp.abs());
    }
    let body = if exp < 0 {
        format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
    } else {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            format!("{digits}{}", "0".repeat(int_len - digits.len()))
        } else {
            format!("{}.{}", &digits[..int_len], &digits[int_len..])
        }
    };
    format!("{sign}{body}")
}

/// Adds `key: node` to a mapping under construction; a duplicate replaces the
/// earlier value (last wins) and is reported.
fn insert_entry(
    entries: &mut Vec<(Key, Node)>,
    index: &mut Option<HashMap<String, usize>>,
    key: Key,
    node: Node,
) -> Option<(&'static str, Pos, String)> {
    if let Some(i) = find_key(entries, index, &key.name) {
        let first = entries[i].0.pos;
        let message = format!(
            "duplicate key `{}` (first defined at line {})",
            key.name, first.line
        );
        entries[i].1 = node;
        return Some((codes::DUPLICATE_KEY, key.pos, message));
    }
    if let Some(index) = index {
        index.insert(key.name.clone(), entries.len());
    }
    entries.push((key, node));
    if index.is_none() && entries.len() > LINEAR_KEY_SCAN {
        *index = Some(
            entries
                .iter()
                .enumerate()
                .map(|(i, (k, _))| (k.name.clone(), i))
                .collect(),
        );
    }
    None
}

/// Tags of YAML 1.1 types that go-yaml knows but the 1.2 core schema lacks.
fn yaml11_suffix(tag: &Tag) -> Option<&'static str> {
    if tag.handle() != "tag:yaml.org,2002:" {
        return None;
    }
    match tag.suffix() {
        "binary" => Some("binary"),
        "timestamp" => Some("timestamp"),
        _ => None,
    }
}

fn find_key(
    entries: &[(Key, Node)],
    index: &Option<HashMap<String, usize>>,
    name: &str,
) -> Option<usize> {
    match index {
        Some(index) => index.get(name).copied(),
        None => entries.iter().position(|(k, _)| k.name == name),
    }
}

/// Inserts merged entries at the position of their `<<` key, skipping keys the
/// mapping sets itself and keys an earlier merge source already provided.
fn apply_merges(
    entries: Vec<(Key, Node)>,
    merges: Vec<(usize, Node)>,
    index: Option<HashMap<String, usize>>,
) -> Vec<(Key, Node)> {
    let mut seen: std::collections::HashSet<String> = match index {
        Some(index) => index.into_keys().collect(),
        None => entries.iter().map(|(k, _)| k.name.clone()).collect(),
    };
    let mut out = Vec::with_capacity(entries.len());
    let mut merges = merges.into_iter().peekable();
    for (i, entry) in entries.into_iter().enumerate() {
        while let Some((_, source)) = merges.next_if(|(at, _)| *at <= i) {
            merge_into(&mut out, &mut seen, source);
        }
        out.push(entry);
    }
    for (_, source) in merges {
        merge_into(&mut out, &mut seen, source);
    }
    out
}

fn merge_into(
    out: &mut Vec<(Key, Node)>,
    seen: &mut std::collections::HashSet<String>,
    source: Node,
) {
    if let Value::Map(entries) = source.value {
        for (key, node) in entries {
            if seen.insert(key.name.clone()) {
                out.push((key, node));
            }
        }
    }
}

/// Size and height of a subtree, iteratively (the tree may be deep).
fn cost(node: &Node) -> Cost {
    let mut cost = Cost::default();
    let mut stack = vec![(node, 1usize)];
    while let Some((node, depth)) = stack.pop() {
        cost.nodes += 1;
        cost.height = cost.height.max(depth);
        match &node.value {
            Value::Str(s) => cost.bytes += s.len() as u64,
            Value::Seq(items) => stack.extend(items.iter().map(|n| (n, depth + 1))),
            Value::Map(entries) => {
                for (k, v) in entries {
                    cost.bytes += k.name.len() as u64;
                    stack.push((v, depth + 1));
                }
            }
            _ => cost.bytes += 8,
        }
    }
    // The root itself is at the alias position; only its children add depth.
    cost.height -= 1;
    cost
}

enum Resolved {
    Value(Value),
    /// `.inf`, `.nan` and friends: valid YAML floats, but not JSON numbers.
    NonFinite,
}

/// Resolves a plain scalar the way go-yaml v2 (and so Kubernetes) does.
fn resolve_plain(s: &str) -> Resolved {
    let value = match s.as_bytes().first() {
        None => Value::Null,
        Some(b'~' | b'n' | b'N' | b'y' | b'Y' | b't' | b'T' | b'f' | b'F' | b'o' | b'O') => {
            match s {
                "~" | "null" | "Null" | "NULL" => Value::Null,
                "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On"
                | "ON" => Value::Bool(true),
                "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off"
                | "OFF" => Value::Bool(false),
                _ => Value::Str(s.to_string()),
            }
        }
        Some(b'.' | b'+' | b'-' | b'0'..=b'9') => return resolve_number(s),
        Some(_) => Value::Str(s.to_string()),
    };
    Resolved::Value(value)
}

fn resolve_number(s: &str) -> Resolved {
    let unsigned = s.trim_start_matches(['+', '-']);
    if matches!(
        unsigned,
        ".inf" | ".Inf" | ".INF" | ".nan" | ".NaN" | ".NAN"
    ) && s.len() - unsigned.len() <= 1
        && !(unsigned.ends_with(['n', 'N']) && s.len() != unsigned.len())
    {
        return Resolved::NonFinite;
    }
    let plain: Cow<'_, str> = if s.contains('_') {
        Cow::Owned(s.replace('_', ""))
    } else {
        Cow::Borrowed(s)
    };
    let value = if let Some(n) = go_parse_int(&plain) {
        Value::Number(n)
    } else if is_yaml_float(&plain) {
        match plain
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            Some(n) => Value::Number(n),
            // Overflows f64: go-yaml keeps it as a string.
            None => Value::Str(s.to_string()),
        }
    } else {
        Value::Str(s.to_string())
    };
    Resolved::Value(value)
}

/// `strconv.ParseInt(s, 0, 64)`, then `ParseUint`: an optional sign, then
/// `0x`/`0o`/`0b` prefixes or a leading `0` for octal.
fn go_parse_int(s: &str) -> Option<serde_json::Number> {
    let (negative, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits) = match body.as_bytes() {
        [b'0', b'x' | b'X', ..] => (16, &body[2..]),
        [b'0', b'o' | b'O', ..] => (8, &body[2..]),
        [b'0', b'b' | b'B', ..] => (2, &body[2..]),
        [b'0', _, ..] => (8, &body[1..]),
        _ => (10, body),
    };
    if digits.is_empty() || !digits.bytes().all(|b| (b as char).is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if negative {
        if magnitude <= i64::MAX as u64 + 1 {
            Some(serde_json::Number::from(
                0i64.wrapping_sub_unsigned(magnitude),
            ))
        } else {
            None
        }
    } else {
        Some(serde_json::Number::from(magnitude))
    }
}

/// go-yaml's `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'-' | b'+')));
    let digits = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

mod fast;

impl Node {
    /// A node at `pos`.
    pub fn new(pos: Pos, value: Value) -> Self {
        Node { pos, value }
    }

    /// The node as JSON, as Kubernetes would see it.
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => serde_json::Value::Number(n.clone()),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Seq(items) => {
                serde_json::Value::Array(items.iter().map(Node::to_json).collect())
            }
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.name.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// The value of `key` if this node is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.get_entry(key).map(|(_, v)| v)
    }

    /// The key and value of `key` if this node is a mapping that has it.
    pub fn get_entry(&self, key: &str) -> Option<(&Key, &Node)> {
        match &self.value {
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.name == key)
                .map(|(k, v)| (k, v)),
            _ => None,
        }
    }

    /// The `i`th item if this node is a sequence.
    pub fn item(&self, i: usize) -> Option<&Node> {
        match &self.value {
            Value::Seq(items) => items.get(i),
            _ => None,
        }
    }

    /// The string if this node is one.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Where a diagnostic about `path` should point: the map key for a key
    /// segment (so a problem with `spec.limits` points at `limits:`), the item
    /// for an index segment. When the path does not fully exist, the position
    /// of the deepest part that does (the document root if none does).
    pub fn locate(&self, path: &JsonPath) -> Pos {
        self.walk(path, true)
    }

    /// Like [`Node::locate`], but the position of the value at `path` rather
    /// than of its key.
    pub fn locate_value(&self, path: &JsonPath) -> Pos {
        self.walk(path, false)
    }

    /// The node at `path`, if it exists.
    pub fn at_path(&self, path: &JsonPath) -> Option<&Node> {
        let mut node = self;
        for seg in &path.0 {
            node = match seg {
                Seg::Key(k) => node.get(k)?,
                Seg::Index(i) => node.item(*i)?,
            };
        }
        Some(node)
    }

    fn walk(&self, path: &JsonPath, key_pos: bool) -> Pos {
        let mut node = self;
        let mut pos = self.pos;
        for seg in &path.0 {
            match seg {
                Seg::Key(k) => match node.get_entry(k) {
                    Some((key, value)) => {
                        pos = if key_pos { key.pos } else { value.pos };
                        node = value;
                    }
                    None => break,
                },
                Seg::Index(i) => match node.item(*i) {
                    Some(item) => {
                        pos = item.pos;
                        node = item;
                    }
                    None => break,
                },
            }
        }
        pos
    }
}

#[cfg(test)]
mod tests;
