//! Reading a file of Kubernetes objects: JSON (one document, a `v1/List`, an
//! array, or JSON lines) or multi-document YAML.
//!
//! - Every object keeps the line and column where it starts, the items of
//!   a `v1/List` included, so every problem names its file and line.
//! - YAML goes through the same positioned parser as `validate`
//!   ([`crate::config::yaml`]), with its Kubernetes scalar rules and its
//!   diagnostics; its budgets scale with the file's size, so a snapshot that
//!   reads as JSON reads as YAML too, while alias and depth limits still
//!   stop YAML bombs. Empty documents (`---` at the end, or followed only by
//!   a comment) are skipped, as kubectl does.
//! - JSON objects are kept as text and deserialised straight into their
//!   typed form ([`Item::decode`]): no intermediate `serde_json::Value`.

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::yaml::{self, Limits, Node};
use crate::diag::{Diagnostic, JsonPath, Pos};

/// Why a file of objects could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The message includes the cause, so the cause is not chained again.
    #[error("cannot read {file}: {cause}")]
    Io { file: String, cause: std::io::Error },
    /// A problem at a place in the file, as `validate` reports them.
    #[error("{}", located(.0))]
    Invalid(Box<Diagnostic>),
}

impl ReadError {
    /// The problem as a diagnostic (an I/O error names only the file).
    pub fn diagnostic(&self) -> Diagnostic {
        match self {
            ReadError::Io { file, cause } => {
                Diagnostic::error("io", format!("cannot read the file: {cause}")).in_file(file)
            }
            ReadError::Invalid(d) => (**d).clone(),
        }
    }

    pub(crate) fn at(file: &str, pos: Pos, message: impl Into<String>) -> Self {
        ReadError::Invalid(Box::new(
            Diagnostic::error("object", message).in_file(file).at(pos),
        ))
    }
}

/// `file:line:col: Kind/name: path: message`: a diagnostic without its
/// severity, for callers that print `error:` themselves.
fn located(d: &Diagnostic) -> String {
    let full = d.to_string();
    let severity = format!("{}: ", d.severity);
    match full.find(&severity) {
        Some(i) => format!("{}{}", &full[..i], &full[i + severity.len()..]),
        None => full,
    }
}

/// The content of one object.
#[derive(Debug)]
pub enum Body<'t> {
    /// JSON text, a slice of the file.
    Json(&'t str),
    /// A YAML node with the position of every field.
    Yaml(Node),
}

/// One object of a file, not yet converted.
#[derive(Debug)]
pub struct Item<'t> {
    pub pos: Pos,
    /// `kind`, if the object has one.
    pub kind: Option<String>,
    /// `Kind/name` (or `namespace/name`) for messages.
    pub name: String,
    pub body: Body<'t>,
}

/// The fields read before an object is converted; unknown fields are
/// skipped without being built.
#[derive(Deserialize)]
struct Envelope<'a> {
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<Meta>,
    #[serde(borrow, default)]
    items: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct Meta {
    name: Option<String>,
}

fn display_name(kind: Option<&str>, name: Option<&str>) -> String {
    format!("{}/{}", kind.unwrap_or("object"), name.unwrap_or("?"))
}

fn is_list(kind: Option<&str>) -> bool {
    kind.is_some_and(|k| k.ends_with("List"))
}

impl Item<'_> {
    /// The object as a JSON value.
    pub fn value(&self, file: &str) -> Result<Value, ReadError> {
        match &self.body {
            Body::Json(text) => serde_json::from_str(text).map_err(|e| self.json_error(file, &e)),
            Body::Yaml(node) => Ok(node.to_json()),
        }
    }

    /// The object as its typed form, straight from the text for JSON.
    pub fn decode<T: serde::de::DeserializeOwned>(&self, file: &str) -> Result<T, ReadError> {
        match &self.body {
            Body::Json(text) => serde_json::from_str(text).map_err(|e| self.json_error(file, &e)),
            Body::Yaml(node) => serde_json::from_value(node.to_json()).map_err(|e| {
                ReadError::Invalid(Box::new(
                    Diagnostic::error("object", e.to_string())
                        .in_file(file)
                        .at(self.pos)
                        .with_object(self.name.clone()),
                ))
            }),
        }
    }

    /// Where `path` is inside the object: the exact line and column in
    /// YAML, the object's start in JSON.
    pub fn locate(&self, path: &JsonPath) -> Pos {
        match &self.body {
            Body::Yaml(node) => node.locate_value(path),
            Body::Json(_) => self.pos,
        }
    }

    fn json_error(&self, file: &str, e: &serde_json::Error) -> ReadError {
        ReadError::Invalid(Box::new(
            Diagnostic::error("object", e.to_string())
                .in_file(file)
                .at(offset_pos(self.pos, e))
                .with_object(self.name.clone()),
        ))
    }
}

/// The position of a serde_json error inside an object that starts at
/// `start`.
fn offset_pos(start: Pos, e: &serde_json::Error) -> Pos {
    let line = u32::try_from(e.line()).unwrap_or(1).max(1);
    if line == 1 {
        Pos {
            line: start.line,
            column: start.column + u32::try_from(e.column()).unwrap_or(1).saturating_sub(1),
        }
    } else {
        Pos {
            line: start.line + line - 1,
            column: u32::try_from(e.column()).unwrap_or(1),
        }
    }
}

/// The budgets of a pod or snapshot file of `len` bytes: documents scale
/// with the size (one per 16 bytes, far below the smallest object), alias
/// expansion is capped at the default node count and at the file's own size,
/// nesting at the default depth.
pub fn limits_for(len: usize) -> Limits {
    Limits {
        max_file_bytes: len as u64,
        max_depth: yaml::DEFAULT_MAX_DEPTH,
        max_documents: yaml::DEFAULT_MAX_DOCUMENTS.max(len / 16),
        max_alias_nodes: yaml::DEFAULT_MAX_ALIAS_NODES,
    }
}

/// Reads a file as UTF-8 text: its name for messages, and its text.
pub fn read_text(path: &std::path::Path) -> Result<(String, String), ReadError> {
    let file = path.display().to_string();
    let text = std::fs::read(path).map_err(|cause| ReadError::Io {
        file: file.clone(),
        cause,
    })?;
    let text = String::from_utf8(text).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let line = bytes[..offset].iter().filter(|&&b| b == b'\n').count() + 1;
        ReadError::at(
            &file,
            Pos {
                line: u32::try_from(line).unwrap_or(u32::MAX),
                column: 1,
            },
            format!("invalid UTF-8 at byte offset {offset}; save the file as UTF-8"),
        )
    })?;
    Ok((file, text))
}

/// Splits a file's text into its objects; `List`s and arrays are flattened.
pub fn items<'t>(file: &str, text: &'t str) -> Result<Vec<Item<'t>>, ReadError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        json_items(file, text)
    } else {
        yaml_items(file, text)
    }
}

/// Line and column of byte offsets into a text, computed incrementally
/// (linear in the text, even for one long line).
struct Lines<'t> {
    text: &'t str,
    offset: usize,
    line: u32,
    /// Characters between the start of the line and `offset`.
    column: u32,
}

impl<'t> Lines<'t> {
    fn new(text: &'t str) -> Self {
        Lines {
            text,
            offset: 0,
            line: 1,
            column: 0,
        }
    }

    /// The position of `slice`, a part of the text at or after every
    /// slice asked about before.
    fn of(&mut self, slice: &str) -> Pos {
        let at = (slice.as_ptr() as usize).saturating_sub(self.text.as_ptr() as usize);
        let at = at.min(self.text.len()).max(self.offset);
        for b in &self.text.as_bytes()[self.offset..at] {
            if *b == b'\n' {
                self.line = self.line.saturating_add(1);
                self.column = 0;
            } else if b & 0xC0 != 0x80 {
                // Not a UTF-8 continuation byte: a new character.
                self.column = self.column.saturating_add(1);
            }
        }
        self.offset = at;
        Pos {
            line: self.line,
            column: self.column.saturating_add(1),
        }
    }
}

fn json_items<'t>(file: &str, text: &'t str) -> Result<Vec<Item<'t>>, ReadError> {
    let mut lines = Lines::new(text);
    let mut out = Vec::new();
    let whole_error = |e: &serde_json::Error| {
        ReadError::at(
            file,
            offset_pos(Pos { line: 1, column: 1 }, e),
            format!("invalid JSON: {e}"),
        )
    };
    if text.trim_start().starts_with('[') {
        let array: Vec<&'t RawValue> = serde_json::from_str(text).map_err(|e| whole_error(&e))?;
        for raw in array {
            json_object(file, raw.get(), &mut lines, &mut out)?;
        }
        return Ok(out);
    }
    match serde_json::from_str::<&'t RawValue>(text) {
        Ok(raw) => json_object(file, raw.get(), &mut lines, &mut out)?,
        Err(whole) => {
            let many = text.lines().filter(|l| !l.trim().is_empty()).count() > 1;
            if !many {
                return Err(whole_error(&whole));
            }
            // JSON lines: one object per line.
            for (i, l) in text.lines().enumerate() {
                if l.trim().is_empty() {
                    continue;
                }
                let start = Pos {
                    line: u32::try_from(i + 1).unwrap_or(u32::MAX),
                    column: 1,
                };
                let raw: &'t RawValue = serde_json::from_str(l).map_err(|e| {
                    ReadError::at(file, offset_pos(start, &e), format!("invalid JSON: {e}"))
                })?;
                json_object(file, raw.get(), &mut lines, &mut out)?;
            }
        }
    }
    Ok(out)
}

/// One JSON object, or the items of a List.
fn json_object<'t>(
    file: &str,
    text: &'t str,
    lines: &mut Lines<'t>,
    out: &mut Vec<Item<'t>>,
) -> Result<(), ReadError> {
    let pos = lines.of(text);
    if !text.starts_with('{') {
        return Err(ReadError::at(
            file,
            pos,
            "expected a Kubernetes object (a JSON object)",
        ));
    }
    let env: Envelope<'t> = serde_json::from_str(text)
        .map_err(|e| ReadError::at(file, offset_pos(pos, &e), format!("invalid object: {e}")))?;
    if is_list(env.kind.as_deref()) {
        for raw in env.items.unwrap_or_default() {
            json_object(file, raw.get(), lines, out)?;
        }
        return Ok(());
    }
    out.push(Item {
        pos,
        name: display_name(
            env.kind.as_deref(),
            env.metadata.as_ref().and_then(|m| m.name.as_deref()),
        ),
        kind: env.kind,
        body: Body::Json(text),
    });
    Ok(())
}

fn yaml_items<'t>(file: &str, text: &str) -> Result<Vec<Item<'t>>, ReadError> {
    let parsed = yaml::parse_documents(file, text.as_bytes(), &limits_for(text.len()));
    if let Some(d) = parsed
        .diagnostics
        .into_iter()
        .find(|d| d.severity == crate::diag::Severity::Error)
    {
        return Err(ReadError::Invalid(Box::new(d)));
    }
    let mut out = Vec::new();
    for doc in parsed.docs {
        yaml_object(file, doc.root, &mut out)?;
    }
    Ok(out)
}

fn yaml_object<'t>(file: &str, node: Node, out: &mut Vec<Item<'t>>) -> Result<(), ReadError> {
    match node.value {
        // An empty document, or one with only comments.
        yaml::Value::Null => Ok(()),
        yaml::Value::Seq(items) => {
            for item in items {
                yaml_object(file, item, out)?;
            }
            Ok(())
        }
        yaml::Value::Map(_) => {
            let kind = node.get("kind").and_then(Node::as_str).map(str::to_string);
            if is_list(kind.as_deref()) {
                let yaml::Value::Map(entries) = node.value else {
                    unreachable!("matched a map")
                };
                for (k, v) in entries {
                    if k.name != "items" {
                        continue;
                    }
                    match v.value {
                        yaml::Value::Seq(items) => {
                            for item in items {
                                yaml_object(file, item, out)?;
                            }
                        }
                        yaml::Value::Null => {}
                        _ => {
                            return Err(ReadError::at(
                                file,
                                v.pos,
                                "items of a List must be a list of objects",
                            ));
                        }
                    }
                }
                return Ok(());
            }
            let name = node
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(Node::as_str);
            out.push(Item {
                pos: node.pos,
                name: display_name(kind.as_deref(), name),
                kind,
                body: Body::Yaml(node),
            });
            Ok(())
        }
        _ => Err(ReadError::at(
            file,
            node.pos,
            "expected a Kubernetes object (a mapping)",
        )),
    }
}
