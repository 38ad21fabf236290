//! YAML parsing with positions. Every node of a parsed document keeps the
//! line and column it came from, so a diagnostic about a JSON path can point
//! at the most specific YAML node. Parsing is bounded: file size, document
//! count, nesting depth and alias expansion all have limits, and a file that
//! breaks one gets a diagnostic instead of a panic or a hang.

use crate::diag::Pos;

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
