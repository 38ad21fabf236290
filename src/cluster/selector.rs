//! Label selectors: `meta/v1` `LabelSelector` compiled once and matched many
//! times, with the semantics of apimachinery's `LabelSelectorAsSelector`.
//!
//! `Selector::parse` reads a selector string as apimachinery's `labels.Parse`
//! does; it is the one port of it, used by the served API's queries and by
//! scenario steps.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A `LabelSelector` that is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{key}: operator {operator:?} is not one of In, NotIn, Exists, DoesNotExist")]
    UnknownOperator { key: String, operator: String },
    #[error("{key}: values must be non-empty for operator {operator}")]
    MissingValues { key: String, operator: &'static str },
    #[error("{key}: values must be empty for operator {operator}")]
    UnexpectedValues { key: String, operator: &'static str },
}

/// One condition on a label.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
    /// `key>n` and `key<n`: the label is an integer above (below) `n`.
    Gt(String, i64),
    Lt(String, i64),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
            Requirement::Gt(k, n) => int_label(labels, k).is_some_and(|v| v > *n),
            Requirement::Lt(k, n) => int_label(labels, k).is_some_and(|v| v < *n),
        }
    }
}

/// A label's value as `strconv.ParseInt(v, 10, 64)` reads it.
fn int_label(labels: &BTreeMap<String, String>, key: &str) -> Option<i64> {
    labels.get(key)?.parse().ok()
}

fn with_values(
    key: &str,
    values: BTreeSet<String>,
    operator: &'static str,
) -> Result<BTreeSet<String>, SelectorError> {
    if values.is_empty() {
        return Err(SelectorError::MissingValues {
            key: key.to_string(),
            operator,
        });
    }
    Ok(values)
}

fn without_values(
    key: &str,
    values: &BTreeSet<String>,
    operator: &'static str,
) -> Result<(), SelectorError> {
    if !values.is_empty() {
        return Err(SelectorError::UnexpectedValues {
            key: key.to_string(),
            operator,
        });
    }
    Ok(())
}

/// A compiled label selector.
///
/// As in Kubernetes, an absent selector selects nothing and an empty one
/// selects everything; see [`Selector::from_optional`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// `None` selects nothing; otherwise all requirements must hold.
    requirements: Option<Vec<Requirement>>,
}

impl Default for Selector {
    fn default() -> Self {
        Selector::everything()
    }
}

impl Selector {
    /// Selects every object.
    pub fn everything() -> Self {
        Selector {
            requirements: Some(Vec::new()),
        }
    }

    /// Selects no object.
    pub fn nothing() -> Self {
        Selector { requirements: None }
    }

    /// Selects objects carrying all of these labels (`a=b,c=d`).
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Selector {
            requirements: Some(
                labels
                    .into_iter()
                    .map(|(k, v)| Requirement::In(k.to_string(), BTreeSet::from([v.to_string()])))
                    .collect(),
            ),
        }
    }

    /// Compiles a `LabelSelector`: `matchLabels` are equality requirements,
    /// `matchExpressions` are set-based ones; all must hold.
    pub fn new(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (k, v) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::In(k.clone(), BTreeSet::from([v.clone()])));
        }
        for expr in selector.match_expressions.iter().flatten() {
            let key = expr.key.clone();
            let values: BTreeSet<String> = expr.values.iter().flatten().cloned().collect();
            let requirement = match expr.operator.as_str() {
                "In" => Requirement::In(key, with_values(&expr.key, values, "In")?),
                "NotIn" => Requirement::NotIn(key, with_values(&expr.key, values, "NotIn")?),
                "Exists" => {
                    without_values(&expr.key, &values, "Exists")?;
                    Requirement::Exists(key)
                }
                "DoesNotExist" => {
                    without_values(&expr.key, &values, "DoesNotExist")?;
                    Requirement::DoesNotExist(key)
                }
                other => {
                    return Err(SelectorError::UnknownOperator {
                        key,
                        operator: other.to_string(),
                    });
                }
            };
            requirements.push(requirement);
        }
        Ok(Selector {
            requirements: Some(requirements),
        })
    }

    /// Compiles an optional selector the way PodDisruptionBudgets and
    /// workload controllers do: `None` selects nothing.
    pub fn from_optional(selector: Option<&LabelSelector>) -> Result<Self, SelectorError> {
        selector.map_or(Ok(Selector::nothing()), Selector::new)
    }

    /// Whether this selector selects every object.
    pub fn is_everything(&self) -> bool {
        self.requirements.as_ref().is_some_and(Vec::is_empty)
    }

    /// Whether an object with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements
            .as_ref()
            .is_some_and(|rs| rs.iter().all(|r| r.matches(labels)))
    }

    /// [`Selector::matches`] for an object's optional `metadata.labels`.
    pub fn matches_opt(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        match labels {
            Some(labels) => self.matches(labels),
            None => self.matches(&BTreeMap::new()),
        }
    }
}

/// A token of the selector syntax, as apimachinery's lexer reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    End,
    Ident(String),
    In,
    NotIn,
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    Greater,
    Less,
    Open,
    Close,
    Comma,
}

impl Token {
    /// The text the API server's messages quote for this token.
    fn literal(&self) -> &str {
        match self {
            Token::End => "",
            Token::Ident(s) => s,
            Token::In => "in",
            Token::NotIn => "notin",
            Token::Not => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::Greater => ">",
            Token::Less => "<",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
        }
    }

    /// In a place where values are expected, `in` and `notin` are
    /// identifiers (apimachinery's `Values` context).
    fn into_value(self) -> Token {
        match self {
            Token::In => Token::Ident("in".into()),
            Token::NotIn => Token::Ident("notin".into()),
            t => t,
        }
    }
}

fn special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn symbol(s: &[u8]) -> Option<Token> {
    Some(match s {
        b"(" => Token::Open,
        b")" => Token::Close,
        b"," => Token::Comma,
        b"!" => Token::Not,
        b"=" => Token::Equals,
        b"==" => Token::DoubleEquals,
        b"!=" => Token::NotEquals,
        b">" => Token::Greater,
        b"<" => Token::Less,
        _ => return None,
    })
}

/// Splits a selector into tokens byte by byte, as apimachinery's `Lexer`
/// does: runs of special characters make the longest token they start
/// with, anything else up to a blank or a special character is an
/// identifier (or the keyword `in` or `notin`). The lexer reads a NUL byte
/// as the end of its input: one where a token starts ends the selector,
/// one after a token is consumed with it.
fn tokens(s: &str) -> Result<Vec<Token>, String> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && blank(b[i]) {
            i += 1;
        }
        if i == b.len() || b[i] == 0 {
            out.push(Token::End);
            return Ok(out);
        }
        let start = i;
        if special(b[i]) {
            let mut last = None;
            while i < b.len() && special(b[i]) {
                match symbol(&b[start..=i]) {
                    Some(t) => last = Some(t),
                    // The byte that spoils the token is read again.
                    None if last.is_some() => break,
                    None => {}
                }
                i += 1;
            }
            let Some(token) = last else {
                return Err(format!(
                    "error expected: keyword found '{}'",
                    String::from_utf8_lossy(&b[start..i])
                ));
            };
            out.push(token);
        } else {
            while i < b.len() && b[i] != 0 && !special(b[i]) && !blank(b[i]) {
                i += 1;
            }
            // Identifiers end at ASCII bytes, so the slice is UTF-8.
            out.push(match &s[start..i] {
                "in" => Token::In,
                "notin" => Token::NotIn,
                id => Token::Ident(id.to_string()),
            });
        }
        if b.get(i) == Some(&0) {
            i += 1;
        }
    }
}

/// apimachinery's `Parser` over the tokens of one selector.
struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Token {
        self.tokens[self.at].clone().into_value()
    }

    fn next(&mut self) -> Token {
        let t = self.tokens[self.at].clone();
        self.at = (self.at + 1).min(self.tokens.len() - 1);
        t
    }

    fn next_value(&mut self) -> Token {
        self.next().into_value()
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, String> {
        let mut out = Vec::new();
        loop {
            match self.peek() {
                Token::Ident(_) | Token::Not => {
                    out.push(
                        self.requirement()
                            .map_err(|e| format!("unable to parse requirement: {e}"))?,
                    );
                    match self.next_value() {
                        Token::End => return Ok(out),
                        Token::Comma => match self.peek() {
                            Token::Ident(_) | Token::Not => {}
                            t => {
                                return Err(format!(
                                    "found '{}', expected: identifier after ','",
                                    t.literal()
                                ));
                            }
                        },
                        t => {
                            return Err(format!(
                                "found '{}', expected: ',' or 'end of string'",
                                t.literal()
                            ));
                        }
                    }
                }
                Token::End => return Ok(out),
                t => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        t.literal()
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let mut token = self.next_value();
        let negated = token == Token::Not;
        if negated {
            token = self.next_value();
        }
        let Token::Ident(key) = token else {
            return Err(format!("found '{}', expected: identifier", token.literal()));
        };
        check_key(&key)?;
        if negated {
            return Ok(Requirement::DoesNotExist(key));
        }
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(Requirement::Exists(key));
        }
        let operator = self.next();
        let values = match operator {
            Token::In | Token::NotIn => self.set()?,
            Token::Equals
            | Token::DoubleEquals
            | Token::NotEquals
            | Token::Greater
            | Token::Less => self.exact()?,
            t => {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    t.literal()
                ));
            }
        };
        for v in &values {
            let errors = crate::api::names::label_value_errors(v);
            if let Some(e) = errors.first() {
                return Err(format!("values: Invalid value: {e}"));
            }
        }
        let one = || values.iter().next().cloned().unwrap_or_default();
        let int = |v: String| {
            v.parse::<i64>().map_err(|_| {
                format!("values[0]: Invalid value: {v:?}: for 'Gt', 'Lt' operators, the value must be an integer")
            })
        };
        Ok(match operator {
            Token::In => Requirement::In(key, values),
            Token::NotIn => Requirement::NotIn(key, values),
            Token::NotEquals => Requirement::NotIn(key, values),
            Token::Greater => Requirement::Gt(key, int(one())?),
            Token::Less => Requirement::Lt(key, int(one())?),
            _ => Requirement::In(key, values),
        })
    }

    /// `( a, b )`: a value may be empty (`()`, `(a,)`, `(,a)`).
    fn set(&mut self) -> Result<BTreeSet<String>, String> {
        let open = self.next_value();
        if open != Token::Open {
            return Err(format!("found '{}' expected: '('", open.literal()));
        }
        let mut values = BTreeSet::new();
        match self.peek() {
            Token::Close => {
                self.next();
                values.insert(String::new());
                return Ok(values);
            }
            Token::Ident(_) | Token::Comma => {}
            t => {
                return Err(format!(
                    "found '{}', expected: ',', ')' or identifier",
                    t.literal()
                ));
            }
        }
        loop {
            match self.next_value() {
                Token::Ident(v) => {
                    values.insert(v);
                    match self.peek() {
                        Token::Comma => continue,
                        Token::Close => break,
                        t => return Err(format!("found '{}', expected: ',' or ')'", t.literal())),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.insert(String::new());
                    }
                    match self.peek() {
                        Token::Close => {
                            values.insert(String::new());
                            break;
                        }
                        Token::Comma => {
                            values.insert(String::new());
                        }
                        _ => {}
                    }
                }
                t => {
                    return Err(format!(
                        "found '{}', expected: ',', or identifier",
                        t.literal()
                    ));
                }
            }
        }
        match self.next_value() {
            Token::Close => Ok(values),
            t => Err(format!("found '{}', expected: ')'", t.literal())),
        }
    }

    /// The one value after `=`, `==`, `!=`, `>` or `<`; empty before a
    /// comma or the end.
    fn exact(&mut self) -> Result<BTreeSet<String>, String> {
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        match self.next_value() {
            Token::Ident(v) => Ok(BTreeSet::from([v])),
            t => Err(format!("found '{}', expected: identifier", t.literal())),
        }
    }
}

fn check_key(key: &str) -> Result<(), String> {
    match crate::api::names::qualified_name_errors(key).first() {
        Some(e) => Err(format!("key: Invalid value: {e}")),
        None => Ok(()),
    }
}

impl Selector {
    /// Parses a selector in the API server's string syntax as
    /// `labels.Parse` does: requirements joined by commas, each `k=v`,
    /// `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`, `k`, `!k`, `k>n` or
    /// `k<n`; keys must be qualified names and values label values. An
    /// empty or blank selector selects everything.
    pub fn parse(s: &str) -> Result<Selector, String> {
        let mut parser = Parser {
            tokens: tokens(s)?,
            at: 0,
        };
        Ok(Selector {
            requirements: Some(parser.selector()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.to_string(),
                operator: operator.to_string(),
                values: if values.is_empty() {
                    None
                } else {
                    Some(values.iter().map(|v| v.to_string()).collect())
                },
            }]),
            match_labels: None,
        }
    }

    fn compiled(key: &str, operator: &str, values: &[&str]) -> Selector {
        Selector::new(&expr(key, operator, values)).expect("valid selector")
    }

    #[test]
    fn match_labels_is_equality_on_every_pair() {
        let s = Selector::new(&LabelSelector {
            match_labels: Some(labels(&[("app", "web"), ("tier", "fe")])),
            match_expressions: None,
        })
        .expect("valid");
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "be")])));
        assert_eq!(s, Selector::from_labels([("app", "web"), ("tier", "fe")]));
    }

    #[test]
    fn in_requires_the_key_with_one_of_the_values() {
        let s = compiled("zone", "In", &["a", "b"]);
        assert!(s.matches(&labels(&[("zone", "a")])));
        assert!(!s.matches(&labels(&[("zone", "c")])));
        assert!(!s.matches(&labels(&[])));
    }

    #[test]
    fn not_in_matches_absent_keys() {
        let s = compiled("zone", "NotIn", &["a"]);
        assert!(s.matches(&labels(&[("zone", "b")])));
        assert!(s.matches(&labels(&[])));
        assert!(!s.matches(&labels(&[("zone", "a")])));
    }

    #[test]
    fn exists_and_does_not_exist_ignore_values() {
        let exists = compiled("gpu", "Exists", &[]);
        let absent = compiled("gpu", "DoesNotExist", &[]);
        let with = labels(&[("gpu", "")]);
        let without = labels(&[("cpu", "x")]);
        assert!(exists.matches(&with) && !exists.matches(&without));
        assert!(absent.matches(&without) && !absent.matches(&with));
    }

    #[test]
    fn malformed_expressions_are_rejected() {
        assert!(matches!(
            Selector::new(&expr("k", "In", &[])),
            Err(SelectorError::MissingValues { .. })
        ));
        assert!(matches!(
            Selector::new(&expr("k", "Exists", &["v"])),
            Err(SelectorError::UnexpectedValues { .. })
        ));
        assert!(matches!(
            Selector::new(&expr("k", "Gt", &["1"])),
            Err(SelectorError::UnknownOperator { .. })
        ));
    }

    #[test]
    fn empty_selects_everything_and_absent_selects_nothing() {
        let empty = Selector::from_optional(Some(&LabelSelector::default())).expect("valid");
        assert!(empty.is_everything());
        assert!(empty.matches_opt(None));
        let absent = Selector::from_optional(None).expect("valid");
        assert!(!absent.is_everything());
        assert!(!absent.matches(&labels(&[("a", "b")])));
        assert!(!absent.matches_opt(None));
    }
}
