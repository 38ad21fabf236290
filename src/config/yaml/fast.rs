//! A line-based reader for the block-style subset of YAML that
//! configuration files are written in: block mappings and sequences (also a
//! sequence at its parent key's indentation), single-line plain and quoted
//! scalars without escapes, single-line flow sequences of such scalars, `{}`,
//! comments and `---`. It emits the same events, at the same positions, as
//! granit-parser, and returns [`Fast::Bail`] on anything else (anchors,
//! tags, block scalars, multi-line scalars, tabs, escapes, syntax errors...),
//! after which the caller parses the file again with granit-parser. A test
//! compares both readers on every input the fast one accepts.

use std::borrow::Cow;

use serde_saphyr::granit_parser::{Event, ScalarStyle, StructureStyle};

use super::{Builder, Pos, to_u32};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fast {
    /// The file was handled (possibly stopped at a limit).
    Done,
    /// Outside the subset: parse it with granit-parser instead.
    Bail,
}

/// An open block collection.
enum Open {
    Map {
        /// 0-based column of the keys.
        indent: usize,
        /// A key was emitted and its value has not started: where an
        /// empty value would be.
        pending: Option<Pos>,
    },
    Seq {
        /// 0-based column of the dashes.
        indent: usize,
        /// A sequence at its parent key's indentation.
        indentless: bool,
        /// A dash was emitted and its item has not started: where an
        /// empty item would be.
        pending: Option<Pos>,
    },
}

enum Err {
    Bail,
    Stopped,
}

struct Reader<'b, 'a> {
    b: &'b mut Builder<'a>,
    stack: Vec<Open>,
    in_doc: bool,
    /// The root node of the current document has been started.
    has_root: bool,
    /// `---` line of the current document, if explicit.
    marker: Option<u32>,
    /// A blank or comment line was seen since the `---` line.
    after_marker_gap: bool,
}

pub(super) fn run(text: &str, b: &mut Builder<'_>) -> Fast {
    if text.starts_with('\u{feff}') {
        return Fast::Bail;
    }
    let mut r = Reader {
        b,
        stack: Vec::new(),
        in_doc: false,
        has_root: false,
        marker: None,
        after_marker_gap: false,
    };
    match r.lines(text) {
        Ok(()) => Fast::Done,
        Err(Err::Stopped) => Fast::Done,
        Err(Err::Bail) => Fast::Bail,
    }
}

fn pos(line: u32, text: &str, byte: usize) -> Pos {
    // Lines are nearly always ASCII; the check stops at the first other byte.
    let column = if text.as_bytes()[..byte.min(text.len())].is_ascii() {
        byte + 1
    } else {
        text.get(..byte).map_or(byte, |p| p.chars().count()) + 1
    };
    Pos {
        line,
        column: to_u32(column),
    }
}

/// Characters that cannot start a plain scalar here.
fn bad_start(c: u8) -> bool {
    matches!(
        c,
        b',' | b'['
            | b']'
            | b'{'
            | b'}'
            | b'#'
            | b'&'
            | b'*'
            | b'!'
            | b'|'
            | b'>'
            | b'\''
            | b'"'
            | b'%'
            | b'@'
            | b'`'
            | b'?'
            | b':'
            | b'-'
            | b'<'
            | b'\\'
    )
}

/// A plain scalar that means the same in every context we use it in.
fn simple_plain(s: &str) -> bool {
    let b = s.as_bytes();
    let Some(&first) = b.first() else {
        return false;
    };
    // `-5`, `-foo` are fine plain scalars; other indicators are not.
    if bad_start(first)
        && !(first == b'-' && b.get(1).is_some_and(|&n| n != b' ') && !s.starts_with("---"))
    {
        return false;
    }
    // One pass: no `: `, ` #` or backslash inside, and no `:` or blank
    // at the end (`-:` is a key, not a scalar).
    let mut prev = 0u8;
    for &c in b {
        if c == b'\\' || (prev == b':' && c == b' ') || (prev == b' ' && c == b'#') {
            return false;
        }
        prev = c;
    }
    prev != b':' && prev != b' '
}

impl Reader<'_, '_> {
    fn ev(&mut self, event: Event<'_>, at: Pos) -> Result<(), Err> {
        self.b.event(event, at).map_err(|_| Err::Stopped)
    }

    fn scalar(&mut self, text: &str, style: ScalarStyle, at: Pos) -> Result<(), Err> {
        self.ev(Event::Scalar(Cow::Borrowed(text), style, 0, None), at)
    }

    fn null(&mut self, at: Pos) -> Result<(), Err> {
        self.scalar("~", ScalarStyle::Plain, at)
    }

    fn lines(&mut self, text: &str) -> Result<(), Err> {
        let mut lineno: u32 = 0;
        for raw in text.split('\n') {
            lineno = lineno.saturating_add(1);
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if line.contains(['\t', '\r']) {
                return Err(Err::Bail);
            }
            let indent = line.len() - line.trim_start_matches(' ').len();
            let rest = &line[indent..];
            if rest.is_empty() {
                continue;
            }
            if rest.starts_with('#') {
                self.after_marker_gap = true;
                continue;
            }
            if indent == 0 {
                if rest == "---" {
                    self.end_doc()?;
                    self.start_doc(Pos {
                        line: lineno,
                        column: 1,
                    })?;
                    self.marker = Some(lineno);
                    self.after_marker_gap = false;
                    continue;
                }
                if rest.starts_with("---") || rest.starts_with("...") || rest.starts_with('%') {
                    return Err(Err::Bail);
                }
            }
            if !self.in_doc {
                self.start_doc(Pos {
                    line: lineno,
                    column: 1,
                })?;
            }
            self.line(lineno, line, indent)?;
        }
        self.end_doc()
    }

    fn start_doc(&mut self, at: Pos) -> Result<(), Err> {
        self.ev(Event::DocumentStart(false, None), at)?;
        self.in_doc = true;
        self.has_root = false;
        self.marker = None;
        Ok(())
    }

    fn end_doc(&mut self) -> Result<(), Err> {
        if !self.in_doc {
            return Ok(());
        }
        self.close(|_| true)?;
        if !self.has_root {
            // An empty document: granit puts its null just after `---`.
            match self.marker {
                Some(line) if !self.after_marker_gap => self.null(Pos { line, column: 4 })?,
                _ => return Err(Err::Bail),
            }
        }
        self.ev(Event::DocumentEnd, Pos::default())?;
        self.in_doc = false;
        Ok(())
    }

    /// Closes open collections while `done` says so, filling in empty values.
    fn close(&mut self, done: impl Fn(&Open) -> bool) -> Result<(), Err> {
        while let Some(top) = self.stack.last() {
            if !done(top) {
                break;
            }
            let (pending, end) = match top {
                Open::Map { pending, .. } => (*pending, Event::MappingEnd),
                Open::Seq { pending, .. } => (*pending, Event::SequenceEnd),
            };
            if let Some(at) = pending {
                self.null(at)?;
            }
            self.stack.pop();
            self.ev(end, Pos::default())?;
        }
        Ok(())
    }

    fn line(&mut self, lineno: u32, line: &str, indent: usize) -> Result<(), Err> {
        let rest = &line[indent..];
        let dash = rest == "-" || rest.starts_with("- ");
        self.close(|top| match top {
            Open::Map { indent: i, .. } => *i > indent,
            Open::Seq {
                indent: i,
                indentless,
                ..
            } => *i > indent || (*indentless && *i == indent && !dash),
        })?;
        // A sibling of an entry or item whose value was empty.
        let flush = match self.stack.last_mut() {
            Some(Open::Map {
                indent: i, pending, ..
            }) if *i == indent && !dash => pending.take(),
            Some(Open::Seq {
                indent: i, pending, ..
            }) if *i == indent && dash => pending.take(),
            _ => None,
        };
        if let Some(at) = flush {
            self.null(at)?;
        }
        if dash {
            self.dash(lineno, line, indent)
        } else {
            self.entry_line(lineno, line, indent)
        }
    }

    fn dash(&mut self, lineno: u32, line: &str, indent: usize) -> Result<(), Err> {
        let after = &line[indent + 1..];
        let content_at = indent + 1 + (after.len() - after.trim_start_matches(' ').len());
        let content = &line[content_at..];
        let empty = content.is_empty() || content.starts_with('#');
        match self.stack.last_mut() {
            Some(Open::Seq {
                indent: i,
                pending: None,
                ..
            }) if *i == indent => {}
            Some(Open::Map {
                indent: i,
                pending: pending @ Some(_),
            }) if indent >= *i => {
                let indentless = indent == *i;
                *pending = None;
                // granit puts an indentless sequence at its first item.
                let at = if indentless {
                    if empty {
                        return Err(Err::Bail);
                    }
                    pos(lineno, line, content_at)
                } else {
                    pos(lineno, line, indent)
                };
                self.open_seq(indent, indentless, at)?;
            }
            Some(Open::Seq {
                indent: i,
                pending: pending @ Some(_),
                ..
            }) if indent > *i => {
                *pending = None;
                self.open_seq(indent, false, pos(lineno, line, indent))?;
            }
            None if !self.has_root => {
                self.has_root = true;
                self.open_seq(indent, false, pos(lineno, line, indent))?;
            }
            _ => return Err(Err::Bail),
        }
        if empty {
            if !content.is_empty() {
                // granit puts the null of `- # comment` after the comment.
                return Err(Err::Bail);
            }
            if let Some(Open::Seq { pending, .. }) = self.stack.last_mut() {
                *pending = Some(pos(lineno, line, content_at));
            }
            return Ok(());
        }
        if content == "-" || content.starts_with("- ") {
            return Err(Err::Bail);
        }
        if let Some((key_end, value_at)) = split_entry(content) {
            let key_at = pos(lineno, line, content_at);
            self.stack.push(Open::Map {
                indent: content_at,
                pending: None,
            });
            self.ev(Event::MappingStart(StructureStyle::Block, 0, None), key_at)?;
            return self.entry(
                lineno,
                line,
                content_at,
                content_at + key_end,
                content_at + value_at,
            );
        }
        self.value(lineno, line, content_at)
    }

    fn open_seq(&mut self, indent: usize, indentless: bool, at: Pos) -> Result<(), Err> {
        self.stack.push(Open::Seq {
            indent,
            indentless,
            pending: None,
        });
        self.ev(Event::SequenceStart(StructureStyle::Block, 0, None), at)
    }

    fn entry_line(&mut self, lineno: u32, line: &str, indent: usize) -> Result<(), Err> {
        let rest = &line[indent..];
        let Some((key_end, value_at)) = split_entry(rest) else {
            // A lone scalar: only as the whole document.
            if self.stack.is_empty() && !self.has_root {
                self.has_root = true;
                return self.value(lineno, line, indent);
            }
            return Err(Err::Bail);
        };
        let open_map = match self.stack.last_mut() {
            Some(Open::Map {
                indent: i,
                pending: None,
            }) if *i == indent => false,
            Some(Open::Map {
                indent: i,
                pending: pending @ Some(_),
            })
            | Some(Open::Seq {
                indent: i,
                pending: pending @ Some(_),
                ..
            }) if indent > *i => {
                *pending = None;
                true
            }
            None if !self.has_root => {
                self.has_root = true;
                true
            }
            _ => return Err(Err::Bail),
        };
        if open_map {
            self.stack.push(Open::Map {
                indent,
                pending: None,
            });
            self.ev(
                Event::MappingStart(StructureStyle::Block, 0, None),
                pos(lineno, line, indent),
            )?;
        }
        self.entry(lineno, line, indent, indent + key_end, indent + value_at)
    }

    /// Emits `key: value` whose key starts at `at` and ends at `key_end`,
    /// with the value (if any) at `value_at`.
    fn entry(
        &mut self,
        lineno: u32,
        line: &str,
        at: usize,
        key_end: usize,
        value_at: usize,
    ) -> Result<(), Err> {
        let key = &line[at..key_end];
        let (text, style) = match key.as_bytes()[0] {
            b'"' => (&key[1..key.len() - 1], ScalarStyle::DoubleQuoted),
            b'\'' => (&key[1..key.len() - 1], ScalarStyle::SingleQuoted),
            _ => (key, ScalarStyle::Plain),
        };
        self.scalar(text, style, pos(lineno, line, at))?;
        let value = &line[value_at..];
        if value.is_empty() || value.starts_with('#') {
            if let Some(Open::Map { pending, .. }) = self.stack.last_mut() {
                *pending = Some(pos(lineno, line, key_end));
            }
            return Ok(());
        }
        self.value(lineno, line, value_at)
    }

    /// A value that fits on its line, starting at byte `at`.
    fn value(&mut self, lineno: u32, line: &str, at: usize) -> Result<(), Err> {
        let s = &line[at..];
        let here = pos(lineno, line, at);
        let (len, end) = match s.as_bytes()[0] {
            b'"' | b'\'' => {
                let len = quoted_len(s).ok_or(Err::Bail)?;
                let style = if s.starts_with('"') {
                    ScalarStyle::DoubleQuoted
                } else {
                    ScalarStyle::SingleQuoted
                };
                self.scalar(&s[1..len - 1], style, here)?;
                (len, true)
            }
            b'[' => (self.flow_seq(lineno, line, at)?, true),
            b'{' if s.starts_with("{}") => {
                self.ev(Event::MappingStart(StructureStyle::Flow, 0, None), here)?;
                self.ev(Event::MappingEnd, here)?;
                (2, true)
            }
            _ => {
                let b = s.as_bytes();
                let comment = (1..b.len()).find(|&i| b[i] == b'#' && b[i - 1] == b' ');
                let text = s[..comment.unwrap_or(s.len())].trim_end_matches(' ');
                if !simple_plain(text) {
                    return Err(Err::Bail);
                }
                self.scalar(text, ScalarStyle::Plain, here)?;
                (text.len(), false)
            }
        };
        if end {
            let tail = s[len..].trim_start_matches(' ');
            if !(tail.is_empty() || (tail.starts_with('#') && s[len..].starts_with(' '))) {
                return Err(Err::Bail);
            }
        }
        Ok(())
    }

    /// `[a, "b", c]` of scalars on one line; returns its length in bytes.
    fn flow_seq(&mut self, lineno: u32, line: &str, at: usize) -> Result<usize, Err> {
        let s = &line[at..];
        let close = s.find(']').ok_or(Err::Bail)?;
        let inner = &s[1..close];
        if inner.contains(['[', '{', '}', '#', ':']) {
            return Err(Err::Bail);
        }
        self.ev(
            Event::SequenceStart(StructureStyle::Flow, 0, None),
            pos(lineno, line, at),
        )?;
        if !inner.trim_matches(' ').is_empty() {
            let mut offset = at + 1;
            for item in inner.split(',') {
                let lead = item.len() - item.trim_start_matches(' ').len();
                let text = item.trim_matches(' ');
                let item_at = offset + lead;
                offset += item.len() + 1;
                let here = pos(lineno, line, item_at);
                match text.as_bytes().first() {
                    Some(b'"' | b'\'') => {
                        if quoted_len(text) != Some(text.len()) {
                            return Err(Err::Bail);
                        }
                        let style = if text.starts_with('"') {
                            ScalarStyle::DoubleQuoted
                        } else {
                            ScalarStyle::SingleQuoted
                        };
                        self.scalar(&text[1..text.len() - 1], style, here)?;
                    }
                    _ if simple_plain(text) && !text.contains(' ') => {
                        self.scalar(text, ScalarStyle::Plain, here)?;
                    }
                    _ => return Err(Err::Bail),
                }
            }
        }
        self.ev(Event::SequenceEnd, Pos::default())?;
        Ok(close + 1)
    }
}

/// Length of a quoted scalar at the start of `s` (quotes included), if it
/// closes on this line and has no escapes.
fn quoted_len(s: &str) -> Option<usize> {
    let quote = s.as_bytes()[0];
    let body = &s[1..];
    let end = body.bytes().position(|c| c == quote)?;
    if body[..end].contains('\\') || body.as_bytes().get(end + 1) == Some(&quote) {
        return None;
    }
    Some(end + 2)
}

/// For `key: value` (or `key:`), the byte offsets of the key's end and of
/// the value's start, relative to `s`. `None` if `s` is not a simple entry.
fn split_entry(s: &str) -> Option<(usize, usize)> {
    let key_end = match s.as_bytes()[0] {
        b'"' | b'\'' => quoted_len(s)?,
        _ => {
            let b = s.as_bytes();
            let colon =
                (0..b.len()).find(|&i| b[i] == b':' && b.get(i + 1).is_none_or(|&n| n == b' '))?;
            let key = &s[..colon];
            if !simple_plain(key) || key.contains(['#', '[', ']', '{', '}', ',', ':']) {
                return None;
            }
            colon
        }
    };
    let after = &s[key_end..];
    if after != ":" && !after.starts_with(": ") {
        return None;
    }
    let value = &after[1..];
    let value_at = key_end + 1 + (value.len() - value.trim_start_matches(' ').len());
    Some((key_end, value_at))
}
