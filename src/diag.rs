//! Diagnostics: the one shape every check in dovetail reports problems in.
//!
//! A [`Diagnostic`] names where a problem is (file, line, column, the object's
//! kind/name and a JSON path inside it) and what it is. Loaders, the schema
//! check, the native rules and the cross-object checks all produce them, and
//! the CLI renders them in every output format.
//!
//! Each one also has a `Severity` (`error`, `warning` or `note`), an optional
//! hint (a likely fix, printed as `hint:` after the message) and its path as a
//! `JsonPath`.

use std::fmt;

/// How serious a diagnostic is. Errors make `validate` exit 1; warnings do so
/// only under `--strict`; notes never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
    Note,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        })
    }
}

/// One step of a path into a document.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A path into a document, rendered as `spec.template.spec.requirements[0].minValues`.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JsonPath(pub Vec<Seg>);

impl JsonPath {
    pub fn root() -> Self {
        JsonPath(Vec::new())
    }

    /// Parses a dotted path such as `spec.template.spec.requirements[0].key`.
    /// Keys containing dots cannot be expressed this way; use [`JsonPath::key`].
    pub fn parse(s: &str) -> Self {
        let mut segs = Vec::new();
        for part in s.split('.').filter(|p| !p.is_empty()) {
            let (name, rest) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if !name.is_empty() {
                segs.push(Seg::Key(name.to_string()));
            }
            for idx in rest.split('[').filter(|x| !x.is_empty()) {
                let idx = idx.trim_end_matches(']');
                match idx.parse() {
                    Ok(i) => segs.push(Seg::Index(i)),
                    Err(_) => segs.push(Seg::Key(idx.to_string())),
                }
            }
        }
        JsonPath(segs)
    }

    /// Converts a JSON pointer (`/spec/template/0`) into a path. Numeric
    /// segments become indexes.
    pub fn from_pointer(ptr: &str) -> Self {
        let segs = ptr
            .split('/')
            .skip(1)
            .map(|s| {
                let s = s.replace("~1", "/").replace("~0", "~");
                match s.parse::<usize>() {
                    Ok(i) => Seg::Index(i),
                    Err(_) => Seg::Key(s),
                }
            })
            .collect();
        JsonPath(segs)
    }

    pub fn key(&self, k: impl Into<String>) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Key(k.into()));
        p
    }

    pub fn index(&self, i: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for seg in &self.0 {
            match seg {
                Seg::Key(k) if k.contains(['.', '[', ']', '/']) || k.is_empty() => {
                    write!(f, "[{k:?}]")?
                }
                Seg::Key(k) => {
                    if !first {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Index(i) => write!(f, "[{i}]")?,
            }
            first = false;
        }
        Ok(())
    }
}

impl serde::Serialize for JsonPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A 1-based line and column in a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Pos {
    pub line: u32,
    pub column: u32,
}

/// One problem found in the configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// A short stable identifier of the check, e.g. `schema`, `cel`, `taint-duplicate`.
    pub code: &'static str,
    /// Repository-relative path with `/` separators; empty for repository-wide problems.
    pub file: String,
    pub line: u32,
    pub column: u32,
    /// `Kind/name` of the object, when the problem belongs to one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// Path inside the object; root for whole-document problems.
    pub path: JsonPath,
    pub message: String,
    /// A likely fix, printed as `hint:` after the message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// For schema diagnostics, the JSON Schema keyword that failed; lets a
    /// more specific check supersede a bare `pattern` mismatch.
    #[serde(skip)]
    pub keyword: Option<&'static str>,
}

impl Diagnostic {
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code,
            file: String::new(),
            line: 0,
            column: 0,
            object: None,
            path: JsonPath::root(),
            message: message.into(),
            hint: None,
            keyword: None,
        }
    }

    pub fn warning(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, message)
        }
    }

    pub fn note(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Note,
            ..Diagnostic::error(code, message)
        }
    }

    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        self.file = file.into();
        self
    }

    pub fn at(mut self, pos: Pos) -> Self {
        self.line = pos.line;
        self.column = pos.column;
        self
    }

    pub fn with_object(mut self, object: impl Into<String>) -> Self {
        self.object = Some(object.into());
        self
    }

    pub fn with_path(mut self, path: JsonPath) -> Self {
        self.path = path;
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn with_keyword(mut self, keyword: &'static str) -> Self {
        self.keyword = Some(keyword);
        self
    }

    /// Orders diagnostics for output: by file, position, then message.
    pub fn sort_key(&self) -> (&str, u32, u32, &str, &str) {
        (&self.file, self.line, self.column, self.code, &self.message)
    }
}

impl fmt::Display for Diagnostic {
    /// `file:line:col: severity: Kind/name: path: message`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.file.is_empty() {
            write!(f, "{}", self.file)?;
            if self.line > 0 {
                write!(f, ":{}:{}", self.line, self.column)?;
            }
            f.write_str(": ")?;
        }
        write!(f, "{}", self.severity)?;
        if let Some(obj) = &self.object {
            write!(f, ": {obj}")?;
        }
        if !self.path.is_root() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// `Kind/name` of an object, for messages.
pub fn kind_name(o: &serde_json::Value) -> String {
    let kind = o
        .get("kind")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("object");
    let name = o
        .pointer("/metadata/name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("?");
    format!("{kind}/{name}")
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Text for XML or HTML content and attribute values: the five markup
/// characters as entities, control characters other than newline and tab
/// (which XML 1.0 cannot hold) left out.
pub fn escape_markup(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

/// Levenshtein distance, for "did you mean" hints.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("main", "mian"), 2);
        assert_eq!(edit_distance("main", "main"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("release", "relase"), 1);
    }

    #[test]
    fn path_round_trips_through_display() {
        let p = JsonPath::parse("spec.template.spec.requirements[3].minValues");
        assert_eq!(
            p.to_string(),
            "spec.template.spec.requirements[3].minValues"
        );
        assert_eq!(p.0.len(), 6);
        assert_eq!(p.0[4], Seg::Index(3));
    }

    #[test]
    fn pointer_converts_escapes_and_indexes() {
        let p = JsonPath::from_pointer("/metadata/labels/karpenter.sh~1nodepool");
        assert_eq!(
            p.0,
            vec![
                Seg::Key("metadata".into()),
                Seg::Key("labels".into()),
                Seg::Key("karpenter.sh/nodepool".into())
            ]
        );
        assert_eq!(p.to_string(), "metadata.labels[\"karpenter.sh/nodepool\"]");
    }

    #[test]
    fn display_includes_every_locator() {
        let d = Diagnostic::error("schema", "unknown field `foo`")
            .in_file("pools/a.yaml")
            .at(Pos { line: 4, column: 3 })
            .with_object("NodePool/a")
            .with_path(JsonPath::parse("spec.foo"));
        assert_eq!(
            d.to_string(),
            "pools/a.yaml:4:3: error: NodePool/a: spec.foo: unknown field `foo`"
        );
    }
}
